//! The provider-neutral message model and its invariants.

mod check;
mod group;
mod message;
mod repair;

pub(crate) use check::part_has_internal_marker;
pub use check::{
    CheckRules, INTERNAL_MARKER, Violation, ViolationKind, check, find_internal_marker,
    has_internal_marker,
};
pub use group::{ApiRound, Turn, api_rounds, is_safe_split, safe_split_points, turns};
pub use message::{
    ContentForm, DataSource, Extra, Message, Part, PartKind, Request, Role, ToolSpec, WireHints,
    parts_text,
};
pub use repair::{
    INTERRUPTED_RESULT_TEXT, OPENING_PLACEHOLDER_TEXT, RepairReport, object_arguments, repair,
};
