//! Statistics of a set of sessions: what `ctxkeeper inspect` reports.
//!
//! ```
//! use ctxkeeper_core::import::Session;
//! use ctxkeeper_core::model::{CheckRules, Message};
//! use ctxkeeper_core::stats::TraceStats;
//! use ctxkeeper_core::tokens::{Profiles, TokenModel};
//!
//! let session = Session { id: "s".into(), messages: vec![Message::user("hi"), Message::assistant("hello")], ..Session::default() };
//! let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
//! let stats = TraceStats::compute(&[session], &model, &CheckRules::history(), 5);
//! assert_eq!(stats.messages, 2);
//! assert_eq!(stats.by_role["user"].count, 1);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::import::Session;
use crate::model::{CheckRules, Part, PartKind, check};
use crate::tokens::TokenModel;

/// `1234567` as `"1,234,567"`: how reports print counts.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count and the tokens it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub count: u64,
    pub tokens: u64,
}

impl Tally {
    fn add(&mut self, tokens: u64) {
        self.count += 1;
        self.tokens += tokens;
    }
}

/// One of the largest parts of the trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LargeItem {
    pub session: String,
    pub message: usize,
    pub part: usize,
    pub role: String,
    pub kind: String,
    pub tokens: u64,
    /// The first characters of the part's text, on one line.
    pub preview: String,
}

/// One violation, located in its session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocatedViolation {
    pub session: String,
    pub message: usize,
    pub part: Option<usize>,
    pub kind: String,
    pub reason: String,
}

/// Everything `inspect` reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TraceStats {
    pub sessions: usize,
    pub messages: usize,
    /// Tokens of all messages plus each session's tool schemas.
    pub total_tokens: u64,
    pub tool_schema_tokens: u64,
    pub by_role: BTreeMap<String, Tally>,
    pub by_part_kind: BTreeMap<String, Tally>,
    pub tool_calls: u64,
    pub distinct_tool_call_ids: usize,
    pub tool_calls_by_name: BTreeMap<String, u64>,
    pub largest: Vec<LargeItem>,
    pub violations_by_kind: BTreeMap<String, u64>,
    pub violations: Vec<LocatedViolation>,
}

impl TraceStats {
    /// Computes the statistics of `sessions`, keeping the `top` largest parts.
    pub fn compute(
        sessions: &[Session],
        model: &TokenModel,
        rules: &CheckRules,
        top: usize,
    ) -> TraceStats {
        let mut stats = TraceStats {
            sessions: sessions.len(),
            ..TraceStats::default()
        };
        let mut ids: BTreeSet<&str> = BTreeSet::new();
        let mut parts: Vec<LargeItem> = Vec::new();

        for session in sessions {
            let schema_tokens = u64::from(model.tools_tokens(&session.tools));
            stats.tool_schema_tokens += schema_tokens;
            stats.total_tokens += schema_tokens;
            for (index, message) in session.messages.iter().enumerate() {
                stats.messages += 1;
                let tokens = u64::from(model.message_tokens(message));
                stats.total_tokens += tokens;
                stats
                    .by_role
                    .entry(message.role.to_string())
                    .or_default()
                    .add(tokens);
                for (part_index, part) in message.parts.iter().enumerate() {
                    let part_tokens = u64::from(model.part_tokens(part));
                    stats
                        .by_part_kind
                        .entry(part.kind().as_str().to_string())
                        .or_default()
                        .add(part_tokens);
                    if let Part::ToolCall { id, name, .. } = part {
                        stats.tool_calls += 1;
                        ids.insert(id);
                        *stats.tool_calls_by_name.entry(name.clone()).or_default() += 1;
                    }
                    parts.push(LargeItem {
                        session: session.id.clone(),
                        message: index,
                        part: part_index,
                        role: message.role.to_string(),
                        kind: part.kind().as_str().to_string(),
                        tokens: part_tokens,
                        preview: String::new(),
                    });
                }
            }
            for violation in check(&session.messages, rules) {
                *stats
                    .violations_by_kind
                    .entry(violation.kind.as_str().to_string())
                    .or_default() += 1;
                stats.violations.push(LocatedViolation {
                    session: session.id.clone(),
                    message: violation.message,
                    part: violation.part,
                    kind: violation.kind.as_str().to_string(),
                    reason: violation.reason,
                });
            }
        }
        stats.distinct_tool_call_ids = ids.len();

        // Largest first; ties keep trace order so the report is deterministic.
        parts.sort_by_key(|item| std::cmp::Reverse(item.tokens));
        parts.truncate(top);
        for item in &mut parts {
            let session = sessions.iter().find(|s| s.id == item.session);
            if let Some(part) = session.and_then(|s| s.messages[item.message].parts.get(item.part))
            {
                item.preview = preview(part, 80);
            }
        }
        stats.largest = parts;
        stats
    }

    /// The kinds in report order with their tallies (absent kinds omitted).
    pub fn part_kinds_in_order(&self) -> Vec<(PartKind, Tally)> {
        PartKind::ALL
            .iter()
            .filter_map(|k| self.by_part_kind.get(k.as_str()).map(|t| (*k, *t)))
            .collect()
    }
}

/// A one-line preview of a part: its text, a tool call's name and arguments, or its kind.
pub fn preview(part: &Part, max_chars: usize) -> String {
    let text = match part {
        Part::Text { text, .. } => text.clone(),
        Part::ToolCall {
            name, arguments, ..
        } => format!("{name}({arguments})"),
        Part::ToolResult { .. } | Part::Reasoning { .. } => {
            crate::model::Message::new(crate::model::Role::Tool, vec![part.clone()]).text()
        }
        Part::Data { source, .. } => format!("{source:?}"),
        Part::Opaque { value } => value.to_string(),
    };
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max_chars {
        flat
    } else {
        let cut: String = flat.chars().take(max_chars.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Message;
    use crate::tokens::Profiles;

    #[test]
    fn thousands_groups_digits() {
        for (n, grouped) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(thousands(n), grouped);
        }
    }

    #[test]
    fn counts_roles_kinds_calls_and_violations() {
        let session = Session {
            id: "s1".into(),
            messages: vec![
                Message::user("hi"),
                Message::tool_call("a", "search", "{}"),
                Message::tool_result("a", "result ".repeat(50)),
                Message::tool_result("ghost", "x"),
            ],
            ..Session::default()
        };
        let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
        let stats = TraceStats::compute(&[session], &model, &CheckRules::history(), 2);
        assert_eq!(stats.by_role["tool"].count, 2);
        assert_eq!(stats.tool_calls, 1);
        assert_eq!(stats.tool_calls_by_name["search"], 1);
        assert_eq!(stats.largest.len(), 2);
        assert_eq!(
            (stats.largest[0].message, stats.largest[0].kind.as_str()),
            (2, "tool_result")
        );
        assert!(stats.largest[0].preview.starts_with("result result"));
        assert_eq!(stats.violations_by_kind["orphan_tool_result"], 1);
        assert_eq!(stats.violations[0].session, "s1");
        let by_role_total: u64 = stats.by_role.values().map(|t| t.tokens).sum();
        assert_eq!(by_role_total, stats.total_tokens);
    }

    #[test]
    fn preview_is_one_line_and_bounded() {
        assert_eq!(preview(&Part::text("a\n  b"), 10), "a b");
        assert_eq!(preview(&Part::text("abcdefghijkl"), 5), "abcd…");
    }
}
