//! Token accounting: exact counts for OpenAI's encodings, a CJK-aware estimate for everything
//! else, a table of model profiles, calibration from reported usage, and per-message caches.
//!
//! - [`exact`]: `o200k_base` and `cl100k_base`, exact and offline, with early exit at a limit;
//! - [`estimate`]: a one-pass estimate calibrated against o200k, scaled per model;
//! - [`profiles`]: context window, output limit, tokenizer, image rule and overheads of common
//!   models, looked up by name (dated and provider-prefixed names included) and overridable
//!   from TOML;
//! - [`count`]: [`TokenModel`], which counts parts, messages, tool schemas and requests for one
//!   profile, and [`Breakdown`], where the tokens go;
//! - [`ledger`]: [`TokenLedger`] (prefix sums over a growing history) and [`TokenCache`] (counts
//!   by content hash), so a per-step check costs O(new messages);
//! - [`calibrate`]: [`Calibration`], a bounded correction factor learned from the provider's
//!   `usage`;
//! - [`image`]: the providers' image-token rules and image-size sniffing.
//!
//! ```
//! use ctxkeeper_core::model::{Message, Request};
//! use ctxkeeper_core::tokens::{Calibration, Profiles, TokenLedger, TokenModel};
//!
//! let profiles = Profiles::builtin();
//! let model = TokenModel::for_model("claude-sonnet-4-20250514", &profiles);
//! assert_eq!(model.profile.context_window, 200_000);
//!
//! // A growing history: each step counts only what was appended.
//! let mut history = vec![Message::system("You are terse."), Message::user("Summarise RFC 9110.")];
//! let mut ledger = TokenLedger::new();
//! ledger.sync(&history, &model);
//! history.push(Message::assistant("HTTP semantics, in 200 pages."));
//! assert_eq!(ledger.sync(&history, &model), 1);
//!
//! // The provider reported more input tokens than the estimate: later counts are corrected.
//! let request = Request { messages: history.clone(), ..Request::default() };
//! let estimated = model.request_tokens(&request);
//! let mut calibration = Calibration::new();
//! calibration.observe(estimated.max(100), estimated.max(100) * 11 / 10);
//! assert!(calibration.adjust(ledger.total()) > ledger.total());
//! ```

pub mod calibrate;
pub mod count;
pub mod estimate;
pub mod exact;
pub mod image;
pub mod ledger;
pub mod profiles;

pub use calibrate::{Calibration, reported_input_tokens};
pub use count::{Breakdown, TokenModel};
pub use exact::Encoding;
pub use image::ImageRule;
pub use ledger::{TokenCache, TokenLedger, message_hash};
pub use profiles::{
    MatchKind, ModelProfile, ProfileError, ProfileOverride, Profiles, TokenizerKind, TokenizerName,
    beta_window,
};
