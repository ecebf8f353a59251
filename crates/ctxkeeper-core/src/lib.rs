//! ctxkeeper-core: the context engine's pure heart.
//!
//! - [`model`]: the provider-neutral message model, API-round and turn grouping, `check` and
//!   `repair`;
//! - [`formats`]: lossless adapters for OpenAI Chat Completions, OpenAI Responses and Anthropic
//!   Messages;
//! - [`import`]: importers for real agent logs (tau-bench, SWE-agent, OpenHands, Claude Code,
//!   Codex CLI);
//! - [`tokens`]: exact and estimated token counts, model profiles, calibration and the
//!   per-message count cache;
//! - [`summary`]: structured summaries exchanged with summarizers;
//! - [`stats`]: what `ctxkeeper inspect` reports about a trace;
//! - [`engine`]: the compaction cascade, every seed system as a preset, events;
//! - [`replay`]: replays a conversation step by step as the agent lived it and measures it.
//!
//! This crate does no IO of its own: it reads from and writes to memory, so every behaviour can
//! be tested without files, networks or environment variables. Callers at the edge (the CLI,
//! the gateway) read files and pass bytes in.

pub mod engine;
pub mod error;
pub mod formats;
pub mod import;
pub mod model;
pub mod overflow;
pub mod replay;
pub mod stats;
pub mod summary;
pub mod tokens;

pub use error::{ParseError, Position};
