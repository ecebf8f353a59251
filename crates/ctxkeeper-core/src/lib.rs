//! ctxkeeper-core: the context engine's pure heart.
//!
//! - [`artifacts`]: the files an agent's tool calls read, created, modified or deleted;
//! - [`capsule`]: the session capsule that survives every compaction (the user's words, the
//!   files touched, the plan, the open problem);
//! - [`orders`]: standing orders, what the user set for the rest of the session (rules,
//!   constraints, facts, preferences, the goal state), recognised by rules;
//! - [`model`]: the provider-neutral message model, API-round and turn grouping, `check` and
//!   `repair`;
//! - [`formats`]: lossless adapters for OpenAI Chat Completions, OpenAI Responses and Anthropic
//!   Messages;
//! - [`harness`]: what agent harnesses write into the user's turn when they compact their own
//!   history (the compaction prompt, the summary they restart from);
//! - [`import`]: importers for real agent logs (tau-bench, SWE-agent, OpenHands, Claude Code,
//!   Codex CLI);
//! - [`tokens`]: exact and estimated token counts, model profiles, calibration and the
//!   per-message count cache;
//! - [`summary`]: structured summaries exchanged with summarizers;
//! - [`stats`]: what `ctxkeeper inspect` reports about a trace;
//! - [`engine`]: the compaction cascade, every seed system as a preset, events;
//! - [`fidelity`]: probes of what a managed request still tells the model;
//! - [`replay`]: replays a conversation step by step as the agent lived it and measures it;
//! - [`untrusted`]: text the user did not write (tool output, arguments) quoted as data,
//!   never as structure;
//! - [`salience`]: the identifiers, paths and numbers an agent carries from what it read into
//!   what it does next.
//!
//! This crate does no IO of its own: it reads from and writes to memory, so every behaviour can
//! be tested without files, networks or environment variables. Callers at the edge (the CLI,
//! the gateway) read files and pass bytes in.

pub mod artifacts;
pub mod capsule;
pub mod engine;
pub mod error;
pub mod fidelity;
pub mod formats;
pub mod harness;
pub mod import;
pub mod model;
pub mod orders;
pub mod overflow;
pub mod replay;
pub mod salience;
pub mod stats;
pub mod summary;
pub mod tokens;
pub mod untrusted;
pub mod working_set;

pub use error::{ParseError, Position, json_kind};
