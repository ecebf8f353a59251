//! A session's timeline: one point per committed request (when, the input tokens the gateway
//! sent, the window, what the agent would have sent unmanaged) and one record per compaction
//! (trigger, stages, tokens and messages before and after, the archived items), kept in the
//! session's state under the extension key [`TIMELINE`].
//!
//! Events are published, not stored, and the session log holds only messages: without this
//! record a console started later (or `ctxkeeper ui` over a store on another host) could not
//! show how a session's context evolved. The gateway records each step as it commits it
//! ([`record_step`]), in the same compare-and-swapped write, so the timeline and the state
//! never disagree. It is bounded ([`MAX_STEPS`], [`MAX_COMPACTIONS`]); the running totals
//! keep counting past the bound.
//!
//! The unmanaged size of a request is the managed size plus every token compaction shed so
//! far (what the agent's own history holds). Billed input follows `replay`
//! ([`billed_input_tokens`]: uncached input plus a tenth of the cached prefix); a step that
//! compacted counts as wholly uncached, since its prefix changed, so the saving shown is a
//! lower bound.

use std::collections::BTreeMap;

use ctxkeeper_core::replay::billed_input_tokens;
use ctxkeeper_store::events::SessionEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The extension key the timeline is stored under.
pub const TIMELINE: &str = "console_timeline";
/// Request points kept (the oldest leave first).
pub const MAX_STEPS: usize = 2_000;
/// Compaction records kept (the oldest leave first).
pub const MAX_COMPACTIONS: usize = 500;

/// One request: `[at_ms, input_tokens, window, unmanaged_tokens]`, an array to keep the
/// stored state small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepPoint(pub i64, pub u64, pub u64, pub u64);

impl StepPoint {
    pub fn at_ms(&self) -> i64 {
        self.0
    }
    pub fn tokens(&self) -> u64 {
        self.1
    }
    pub fn window(&self) -> u64 {
        self.2
    }
    pub fn unmanaged(&self) -> u64 {
        self.3
    }
}

/// One compaction, as its `context_compaction_end` event told it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionRecord {
    /// Number of the request (1-based) whose step ran it.
    pub step: u64,
    pub at_ms: i64,
    pub reason: String,
    #[serde(default)]
    pub strategy: String,
    #[serde(default)]
    pub stages: Vec<String>,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub messages_before: u64,
    pub messages_after: u64,
    #[serde(default)]
    pub archive_refs: Vec<String>,
    #[serde(default)]
    pub summary_degraded: bool,
}

/// Running totals over every request the session committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    pub requests: u64,
    pub input_tokens: u64,
    pub uncached_input_tokens: u64,
    pub unmanaged_input_tokens: u64,
    pub unmanaged_uncached_input_tokens: u64,
    pub compactions: u64,
    pub tokens_shed: u64,
    pub overflow_recoveries: u64,
    pub degraded_summaries: u64,
}

impl Totals {
    /// Billed input of what was sent (uncached + a tenth of the cached input).
    pub fn billed(&self) -> u64 {
        billed_input_tokens(self.input_tokens, self.uncached_input_tokens)
    }

    /// Billed input had every request carried the whole history.
    pub fn billed_unmanaged(&self) -> u64 {
        billed_input_tokens(
            self.unmanaged_input_tokens,
            self.unmanaged_uncached_input_tokens,
        )
    }

    /// Billed input saved against the unmanaged history (never negative).
    pub fn billed_saved(&self) -> u64 {
        self.billed_unmanaged().saturating_sub(self.billed())
    }

    /// Adds another session's totals.
    pub fn add(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.input_tokens += other.input_tokens;
        self.uncached_input_tokens += other.uncached_input_tokens;
        self.unmanaged_input_tokens += other.unmanaged_input_tokens;
        self.unmanaged_uncached_input_tokens += other.unmanaged_uncached_input_tokens;
        self.compactions += other.compactions;
        self.tokens_shed += other.tokens_shed;
        self.overflow_recoveries += other.overflow_recoveries;
        self.degraded_summaries += other.degraded_summaries;
    }
}

/// A session's timeline (see the [module docs](self)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timeline {
    /// The model of the newest request.
    pub model: Option<String>,
    /// Number (1-based) of the first request `steps` still holds.
    pub first_step: u64,
    pub steps: Vec<StepPoint>,
    pub compactions: Vec<CompactionRecord>,
    pub totals: Totals,
}

impl Timeline {
    /// The timeline stored in a session's extensions (empty when there is none or it cannot
    /// be read: a console must show the session anyway).
    pub fn from_extensions(extensions: &BTreeMap<String, Value>) -> Timeline {
        extensions
            .get(TIMELINE)
            .and_then(|v| Timeline::deserialize(v).ok())
            .unwrap_or_default()
    }

    /// The newest request point.
    pub fn last(&self) -> Option<&StepPoint> {
        self.steps.last()
    }

    /// Adds one committed request from the events its step announced.
    pub fn record(&mut self, events: &[SessionEvent], model: Option<&str>, at_ms: i64) {
        let step = advance(self.steps.last().copied(), self.totals, events, at_ms);
        if let Some(model) = model {
            self.model = Some(model.to_string());
        }
        self.totals = step.totals;
        self.compactions.extend(step.compactions);
        if let Some(point) = step.point {
            self.first_step = self.first_step.max(1);
            self.steps.push(point);
        }
        if self.steps.len() > MAX_STEPS {
            let excess = self.steps.len() - MAX_STEPS;
            self.steps.drain(..excess);
            self.first_step += excess as u64;
        }
        if self.compactions.len() > MAX_COMPACTIONS {
            let excess = self.compactions.len() - MAX_COMPACTIONS;
            self.compactions.drain(..excess);
        }
    }
}

/// What one committed step adds to a timeline.
struct Advanced {
    point: Option<StepPoint>,
    compactions: Vec<CompactionRecord>,
    totals: Totals,
}

/// The point, compactions and totals one step adds after `previous` (the newest point).
fn advance(
    previous: Option<StepPoint>,
    mut totals: Totals,
    events: &[SessionEvent],
    at_ms: i64,
) -> Advanced {
    let mut budget: Option<(u64, u64)> = None;
    let mut shed = 0u64;
    let mut compacted = false;
    let mut compactions = Vec::new();
    let step = totals.requests + 1;
    for event in events {
        let data = &event.data;
        let n = |field: &str| data.get(field).and_then(Value::as_u64).unwrap_or(0);
        match event.name.as_str() {
            "budget_used" => budget = Some((n("tokens"), n("window"))),
            "context_compaction_end" => {
                compacted = true;
                shed += n("tokens_before").saturating_sub(n("tokens_after"));
                let text = |field: &str| {
                    data.get(field)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let strings = |field: &str| -> Vec<String> {
                    data.get(field)
                        .and_then(Value::as_array)
                        .map(|items| {
                            items
                                .iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let degraded = data
                    .get("summary_degraded")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                totals.compactions += 1;
                totals.degraded_summaries += u64::from(degraded);
                compactions.push(CompactionRecord {
                    step,
                    at_ms,
                    reason: text("reason"),
                    strategy: text("strategy"),
                    stages: strings("stages"),
                    tokens_before: n("tokens_before"),
                    tokens_after: n("tokens_after"),
                    messages_before: n("messages_before"),
                    messages_after: n("messages_after"),
                    archive_refs: strings("archive_refs"),
                    summary_degraded: degraded,
                });
            }
            "tool_result_truncated" => {
                compacted = true;
                shed += n("tokens_before").saturating_sub(n("tokens_after"));
            }
            "overflow_recovered" => totals.overflow_recoveries += 1,
            _ => {}
        }
    }
    let Some((tokens, window)) = budget.or(previous.map(|p| (p.tokens(), p.window()))) else {
        return Advanced {
            point: None,
            compactions,
            totals,
        };
    };
    totals.tokens_shed += shed;
    let unmanaged = (tokens + totals.tokens_shed).max(tokens);
    let (uncached, unmanaged_uncached) = match previous {
        Some(p) if !compacted => (
            tokens.saturating_sub(p.tokens()),
            unmanaged.saturating_sub(p.unmanaged()),
        ),
        Some(p) => (tokens, unmanaged.saturating_sub(p.unmanaged())),
        None => (tokens, unmanaged),
    };
    totals.requests = step;
    totals.input_tokens += tokens;
    totals.uncached_input_tokens += uncached;
    totals.unmanaged_input_tokens += unmanaged;
    totals.unmanaged_uncached_input_tokens += unmanaged_uncached;
    Advanced {
        point: Some(StepPoint(at_ms, tokens, window, unmanaged)),
        compactions,
        totals,
    }
}

/// Records one committed step into a session's extensions (the gateway calls it right before
/// the step's compare-and-swapped save). It works on the stored JSON in place, reading only
/// the totals and the newest point, so a step costs the same at request 10 and at request
/// 2,000.
pub fn record_step(
    extensions: &mut BTreeMap<String, Value>,
    events: &[SessionEvent],
    model: Option<&str>,
    at_ms: i64,
) {
    let value = extensions
        .entry(TIMELINE.to_string())
        .or_insert(Value::Null);
    let well_formed = value.as_object().is_some_and(|o| {
        o.get("steps").is_some_and(Value::is_array)
            && o.get("compactions").is_some_and(Value::is_array)
    });
    if !well_formed {
        *value = serde_json::to_value(Timeline::default()).unwrap_or(Value::Null);
    }
    let Some(timeline) = value.as_object_mut() else {
        return;
    };
    let totals = timeline
        .get("totals")
        .and_then(|v| Totals::deserialize(v).ok())
        .unwrap_or_default();
    let previous = timeline
        .get("steps")
        .and_then(Value::as_array)
        .and_then(|steps| steps.last())
        .and_then(|v| StepPoint::deserialize(v).ok());
    let step = advance(previous, totals, events, at_ms);
    if let Some(model) = model {
        timeline.insert("model".into(), Value::from(model));
    }
    if let Ok(totals) = serde_json::to_value(step.totals) {
        timeline.insert("totals".into(), totals);
    }
    if let Some(point) = step.point {
        let first = timeline
            .get("first_step")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .max(1);
        let mut dropped = 0;
        if let Some(steps) = timeline.get_mut("steps").and_then(Value::as_array_mut) {
            steps.push(serde_json::to_value(point).unwrap_or(Value::Null));
            if steps.len() > MAX_STEPS {
                dropped = steps.len() - MAX_STEPS;
                steps.drain(..dropped);
            }
        }
        timeline.insert("first_step".into(), Value::from(first + dropped as u64));
    }
    if let Some(records) = timeline
        .get_mut("compactions")
        .and_then(Value::as_array_mut)
    {
        records.extend(
            step.compactions
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok()),
        );
        if records.len() > MAX_COMPACTIONS {
            let excess = records.len() - MAX_COMPACTIONS;
            records.drain(..excess);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(name: &str, data: Value) -> SessionEvent {
        SessionEvent {
            name: name.into(),
            data,
        }
    }

    fn budget(tokens: u64) -> SessionEvent {
        event(
            "budget_used",
            json!({"tokens": tokens, "window": 1000, "pct": 0.0}),
        )
    }

    #[test]
    fn steps_compactions_and_billed_input_add_up() {
        let mut ext = BTreeMap::new();
        record_step(&mut ext, &[budget(100)], Some("m"), 1);
        record_step(&mut ext, &[budget(300)], Some("m"), 2);
        let compaction = event(
            "context_compaction_end",
            json!({"reason": "tokens", "strategy": "s", "stages": ["mask"], "tokens_before": 500,
                   "tokens_after": 200, "messages_before": 9, "messages_after": 4,
                   "archive_refs": ["sessions/x/a.txt"], "summary_degraded": true}),
        );
        record_step(&mut ext, &[compaction, budget(200)], Some("m2"), 3);
        record_step(&mut ext, &[budget(250)], None, 4);
        let t = Timeline::from_extensions(&ext);
        assert_eq!(t.model.as_deref(), Some("m2"));
        assert_eq!(t.steps.len(), 4);
        assert_eq!(t.steps[2], StepPoint(3, 200, 1000, 500));
        assert_eq!(t.steps[3].unmanaged(), 550);
        assert_eq!(t.compactions[0].step, 3);
        assert_eq!(t.compactions[0].archive_refs, vec!["sessions/x/a.txt"]);
        let totals = t.totals;
        assert_eq!(
            (totals.requests, totals.compactions, totals.tokens_shed),
            (4, 1, 300)
        );
        assert_eq!(totals.degraded_summaries, 1);
        assert_eq!(totals.input_tokens, 850);
        // Managed uncached: 100 + 200 + 200 (compacted: all) + 50.
        assert_eq!(totals.uncached_input_tokens, 550);
        assert_eq!(totals.unmanaged_input_tokens, 100 + 300 + 500 + 550);
        assert_eq!(totals.unmanaged_uncached_input_tokens, 550);
        assert_eq!(totals.billed(), 550 + 30);
        assert_eq!(totals.billed_unmanaged(), 550 + 90);
        assert_eq!(totals.billed_saved(), 60);
    }

    #[test]
    fn the_timeline_is_bounded_and_keeps_counting() {
        let mut t = Timeline::default();
        for i in 0..(MAX_STEPS + 5) {
            t.record(&[budget(10)], None, i as i64);
        }
        assert_eq!(t.steps.len(), MAX_STEPS);
        assert_eq!(t.first_step, 6);
        assert_eq!(t.totals.requests, (MAX_STEPS + 5) as u64);
    }

    #[test]
    fn recording_in_place_matches_the_typed_timeline() {
        let mut ext = BTreeMap::new();
        let mut typed = Timeline::default();
        let compaction = event(
            "context_compaction_end",
            json!({"reason": "overflow", "tokens_before": 900, "tokens_after": 100,
                   "messages_before": 9, "messages_after": 2, "archive_refs": ["r"]}),
        );
        for i in 0..(MAX_STEPS + 3) {
            let mut events = vec![budget(100 + i as u64)];
            if i % 700 == 5 {
                events.insert(0, compaction.clone());
            }
            record_step(&mut ext, &events, Some("m"), i as i64);
            typed.record(&events, Some("m"), i as i64);
        }
        assert_eq!(Timeline::from_extensions(&ext), typed);
        assert_eq!(typed.first_step, 4);
    }

    #[test]
    fn an_unreadable_record_reads_as_empty() {
        let mut ext = BTreeMap::new();
        ext.insert(TIMELINE.to_string(), json!("not a timeline"));
        assert_eq!(Timeline::from_extensions(&ext), Timeline::default());
    }
}
