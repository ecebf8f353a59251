//! What every language face of ctxkeeper shares: one session's managed context in the
//! caller's wire shape, checked input, its store and its archive. The Python extension
//! (`crates/ctxkeeper-py`) and the npm package (`crates/ctxkeeper-node`) are thin layers over
//! this crate: they convert their values to and from `serde_json::Value`, map
//! [`EmbedError`] onto their own error classes and run [`Session`]'s calls on the shared
//! [`runtime`] off their interpreter's thread.
//!
//! # The API shape (shared by every language face)
//!
//! Messages cross the boundary as plain objects in the caller's own wire shape (OpenAI Chat
//! `messages`, Responses `input` items, Anthropic `messages` with `system` apart), never as
//! ctxkeeper types. Each face names the calls in its own idiom (`on_overflow` in Python,
//! `onOverflow` in TypeScript):
//!
//! | call | what it does |
//! | --- | --- |
//! | constructor ([`Options`]) | one session; `policy` a preset name, a config file path or an object of `[policy]` overrides; `store` a session store URL: the session is resumed when stored and saved at every step |
//! | `ingest(messages)` | appends messages; bad input (unknown role, broken tool pairing, a hostile id) is an `InvalidInputError` and changes nothing |
//! | `prepare(max_tokens)` | compacts when a trigger fires; the request's messages and the step's [`Figures`] |
//! | `on_overflow(error)` | the provider said the context is too long: compacts harder so the retry fits ([`Session::recover`]) |
//! | `usage(report)` | the provider's usage report ([`input_tokens`]) for the last request: calibrates the count |
//! | `events()` | the engine's events (`type`: `context_compaction_end`, `tool_result_truncated`, …) |
//! | `search(query)`, `read(reference)`, `archived()` | what left the context, read back ([`Archive`]) |
//! | `compact(focus, overrides)`, `count_tokens()`, `stats()`, `save()`, `session` | on demand |
//!
//! Errors are one hierarchy ([`error::Class`]: `CtxkeeperError`, `InvalidInputError`,
//! `ConfigError`, `StoreError` (`ConflictError`, `ArchiveError`), `NotFoundError`,
//! `ContextOverflowError` (`NoRoomError`, `UnrecoverableError`)).
//!
//! ```no_run
//! use ctxkeeper_embed::{Batch, Options, Session, runtime::runtime};
//! use serde_json::json;
//!
//! let rt = runtime()?;
//! let mut session: Session<()> = Session::open(rt, Options { window: Some(16_000), ..Options::default() })?;
//! let messages = json!([{"role": "user", "content": "Summarize the logs"}]);
//! if let Some(batch) = Batch::parse(session.wire(), messages, None)? {
//!     session.take(rt, batch)?;
//! }
//! let step = session.prepare(rt, None)?;
//! println!("{} input tokens", step.figures.input_tokens);
//! # Ok::<(), ctxkeeper_embed::EmbedError>(())
//! ```

pub mod archive;
pub mod error;
pub mod policy;
pub mod runtime;
pub mod session;
pub mod wire;

pub use archive::Archive;
pub use error::{Class, EmbedError};
pub use policy::PolicySpec;
pub use session::{
    Batch, Emit, Figures, Options, Piece, Session, SessionInfo, Stats, Step, input_tokens,
    input_window, parse_wire,
};
