//! Step-by-step replay of a conversation (in progress).
