//! A session's timeline: one point per committed request (when, the input tokens the gateway
//! sent, the window, what the agent would have sent unmanaged) and one record per compaction
//! (trigger, stages, tokens and messages before and after, the archived items), kept in the
//! session's state. The session layer writes it ([`Sessions::commit`](super::Sessions::commit));
//! the web console ([`crate::ui`]) and anything else that shows a session's history read it
//! ([`Timeline::read`]).
//!
//! Events are published, not stored, and the session log holds only messages: without this
//! record a console started later (or `ctxkeeper ui` over a store on another host) could not
//! show how a session's context evolved. The gateway records each step as it commits it
//! ([`record_step`]), in the same compare-and-swapped write, so the timeline and the state
//! never disagree.
//!
//! Where it is stored keeps a step's write the same size at request 10 and at request 2,000:
//! the points and compaction records are appended to the snapshot's journal
//! ([`Snapshot::journal`](ctxkeeper::snapshot::Snapshot::journal), stored in the current
//! generation's trail), as `{"console_step": [...]}` and `{"console_compaction": {...}}`; only
//! the model and the running totals sit in the state's head, under the extension key
//! [`TIMELINE`]. It is bounded: a new generation carries the newest [`MAX_STEPS`] points and
//! [`MAX_COMPACTIONS`] records ([`bound`]), a reader keeps no more than those, and the running
//! totals keep counting past the bound. States written when the whole timeline sat in the
//! head (its `steps` and `compactions` there) still read; the next step moves those into the
//! journal.
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

/// The extension key of the timeline's head (model and totals).
pub const TIMELINE: &str = "console_timeline";
/// The journal record of one request point.
pub const STEP_RECORD: &str = "console_step";
/// The journal record of one compaction.
pub const COMPACTION_RECORD: &str = "console_compaction";
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

/// What a session's extensions hold of its timeline: the model and the totals, and (in
/// states written when the whole timeline sat there) the points and records.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Head {
    model: Option<String>,
    totals: Totals,
    steps: Vec<StepPoint>,
    compactions: Vec<CompactionRecord>,
}

/// A journal record of the timeline, as stored.
#[derive(Debug, Serialize, Deserialize)]
enum Record {
    #[serde(rename = "console_step")]
    Step(StepPoint),
    #[serde(rename = "console_compaction")]
    Compaction(CompactionRecord),
}

/// Which timeline record a journal value is, by its name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Step,
    Compaction,
}

impl Kind {
    fn of(value: &Value) -> Option<Kind> {
        let object = value.as_object()?;
        let (name, _) = object.iter().next().filter(|_| object.len() == 1)?;
        match name.as_str() {
            STEP_RECORD => Some(Kind::Step),
            COMPACTION_RECORD => Some(Kind::Compaction),
            _ => None,
        }
    }
}

impl Record {
    /// The timeline record a journal value holds (`None`: another host's record, or a value
    /// that cannot be read: a console must show the session anyway).
    fn of(value: &Value) -> Option<Record> {
        Kind::of(value)?;
        Record::deserialize(value).ok()
    }

    fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Timeline {
    /// The timeline a session's state holds: its head in `extensions` and its records in
    /// `records` (the snapshot's journal, or the stored state's whole trail: other values
    /// are passed over). Empty when there is none; what cannot be read is left out.
    pub fn read(extensions: &BTreeMap<String, Value>, records: &[Value]) -> Timeline {
        let head = extensions
            .get(TIMELINE)
            .and_then(|v| Head::deserialize(v).ok())
            .unwrap_or_default();
        let mut timeline = Timeline {
            model: head.model,
            first_step: 0,
            steps: head.steps,
            compactions: head.compactions,
            totals: head.totals,
        };
        for record in records.iter().filter_map(Record::of) {
            match record {
                Record::Step(point) => timeline.steps.push(point),
                Record::Compaction(compaction) => timeline.compactions.push(compaction),
            }
        }
        timeline.keep_newest();
        timeline
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
        self.steps.extend(step.point);
        self.keep_newest();
    }

    /// Keeps the newest points and records within the bounds, and numbers the first point:
    /// every request that made a point counts in `totals.requests`, and the points kept are
    /// the newest ones.
    fn keep_newest(&mut self) {
        if self.steps.len() > MAX_STEPS {
            self.steps.drain(..self.steps.len() - MAX_STEPS);
        }
        if self.compactions.len() > MAX_COMPACTIONS {
            self.compactions
                .drain(..self.compactions.len() - MAX_COMPACTIONS);
        }
        self.first_step = if self.steps.is_empty() {
            0
        } else {
            (self.totals.requests + 1)
                .saturating_sub(self.steps.len() as u64)
                .max(1)
        };
    }
}

/// `tokens_before` as `tokensBefore`.
fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
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
        // A compaction inside a request under `agentrail` is announced as its runtime does
        // (`compaction`, fields in camelCase); every other event names them in snake_case.
        let get = |field: &str| {
            data.get(field)
                .or_else(|| data.get(camel_case(field).as_str()))
        };
        let n = |field: &str| get(field).and_then(Value::as_u64).unwrap_or(0);
        match event.name.as_str() {
            "budget_used" => budget = Some((n("tokens"), n("window"))),
            "context_compaction_end" | "compaction" => {
                compacted = true;
                shed += n("tokens_before").saturating_sub(n("tokens_after"));
                let text = |field: &str| {
                    get(field)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let strings = |field: &str| -> Vec<String> {
                    get(field)
                        .and_then(Value::as_array)
                        .map(|items| {
                            items
                                .iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let degraded = get("summary_degraded")
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

/// Records one committed step: the gateway calls it right before the step's
/// compare-and-swapped save, with the session's extensions and journal. The step's point and
/// compaction records are appended to the journal, the model and totals replaced in the head;
/// it reads only the totals and the newest point, so a step costs the same, and adds the same
/// bytes to the save, at request 10 and at request 2,000. A head that still holds the points
/// and records (written before the journal) hands them over to the journal first.
pub fn record_step(
    extensions: &mut BTreeMap<String, Value>,
    journal: &mut Vec<Value>,
    events: &[SessionEvent],
    model: Option<&str>,
    at_ms: i64,
) {
    let head = extensions.get(TIMELINE);
    let mut previous_model = None;
    let mut totals = Totals::default();
    if let Some(head) = head {
        let legacy = head.get("steps").is_some() || head.get("compactions").is_some();
        if legacy {
            let head = Head::deserialize(head).unwrap_or_default();
            journal.extend(
                head.compactions
                    .into_iter()
                    .map(|c| Record::Compaction(c).to_value()),
            );
            journal.extend(head.steps.into_iter().map(|p| Record::Step(p).to_value()));
            previous_model = head.model;
            totals = head.totals;
        } else {
            previous_model = head
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string);
            totals = head
                .get("totals")
                .and_then(|v| Totals::deserialize(v).ok())
                .unwrap_or_default();
        }
    }
    let previous = journal
        .iter()
        .rev()
        .find(|value| Kind::of(value) == Some(Kind::Step))
        .and_then(|value| match Record::of(value) {
            Some(Record::Step(point)) => Some(point),
            _ => None,
        });
    let step = advance(previous, totals, events, at_ms);
    journal.extend(
        step.compactions
            .into_iter()
            .map(|c| Record::Compaction(c).to_value()),
    );
    journal.extend(step.point.map(|p| Record::Step(p).to_value()));
    let model = model.map(str::to_string).or(previous_model);
    // Fields a newer build keeps in the head stay; what moved to the journal leaves.
    let mut head = match extensions.remove(TIMELINE) {
        Some(Value::Object(head)) => head,
        _ => serde_json::Map::new(),
    };
    for moved in ["steps", "compactions", "first_step"] {
        head.remove(moved);
    }
    if let Some(model) = model {
        head.insert("model".into(), Value::from(model));
    }
    head.insert(
        "totals".into(),
        serde_json::to_value(step.totals).unwrap_or(Value::Null),
    );
    extensions.insert(TIMELINE.to_string(), Value::Object(head));
}

/// Bounds a journal before it goes out as a new generation: the newest [`MAX_STEPS`] points
/// and [`MAX_COMPACTIONS`] compaction records stay, with every other host's records; the
/// older points and records leave (the totals in the head still count them).
pub fn bound(journal: &mut Vec<Value>) {
    let (mut steps, mut compactions) = (0usize, 0usize);
    for value in journal.iter() {
        match Kind::of(value) {
            Some(Kind::Step) => steps += 1,
            Some(Kind::Compaction) => compactions += 1,
            None => {}
        }
    }
    let mut drop_steps = steps.saturating_sub(MAX_STEPS);
    let mut drop_compactions = compactions.saturating_sub(MAX_COMPACTIONS);
    if drop_steps == 0 && drop_compactions == 0 {
        return;
    }
    journal.retain(|value| match Kind::of(value) {
        Some(Kind::Step) if drop_steps > 0 => {
            drop_steps -= 1;
            false
        }
        Some(Kind::Compaction) if drop_compactions > 0 => {
            drop_compactions -= 1;
            false
        }
        _ => true,
    });
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

    /// Records one step as the gateway does.
    fn step(
        ext: &mut BTreeMap<String, Value>,
        journal: &mut Vec<Value>,
        events: &[SessionEvent],
        model: Option<&str>,
        at: i64,
    ) {
        record_step(ext, journal, events, model, at);
    }

    #[test]
    fn steps_compactions_and_billed_input_add_up() {
        let (mut ext, mut journal) = (BTreeMap::new(), Vec::new());
        step(&mut ext, &mut journal, &[budget(100)], Some("m"), 1);
        step(&mut ext, &mut journal, &[budget(300)], Some("m"), 2);
        let compaction = event(
            "context_compaction_end",
            json!({"reason": "tokens", "strategy": "s", "stages": ["mask"], "tokens_before": 500,
                   "tokens_after": 200, "messages_before": 9, "messages_after": 4,
                   "archive_refs": ["sessions/x/a.txt"], "summary_degraded": true}),
        );
        step(
            &mut ext,
            &mut journal,
            &[compaction, budget(200)],
            Some("m2"),
            3,
        );
        step(&mut ext, &mut journal, &[budget(250)], None, 4);
        let t = Timeline::read(&ext, &journal);
        assert_eq!(t.model.as_deref(), Some("m2"));
        assert_eq!(t.steps.len(), 4);
        assert_eq!(t.first_step, 1);
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
        // Four points and one compaction record went to the journal, none to the head.
        assert_eq!(journal.len(), 5);
        assert!(ext[TIMELINE].get("steps").is_none(), "{}", ext[TIMELINE]);
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
        let (mut ext, mut journal) = (BTreeMap::new(), Vec::new());
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
            step(&mut ext, &mut journal, &events, Some("m"), i as i64);
            typed.record(&events, Some("m"), i as i64);
        }
        assert_eq!(Timeline::read(&ext, &journal), typed);
        assert_eq!(typed.first_step, 4);
        // A new generation carries only the newest points; the reading is the same.
        journal.push(json!("00ff"));
        journal.push(json!({"another_host": 1}));
        bound(&mut journal);
        assert_eq!(journal.len(), MAX_STEPS + 3 + 2);
        assert_eq!(Timeline::read(&ext, &journal), typed);
        // Recording goes on from the bounded journal.
        step(&mut ext, &mut journal, &[budget(7)], None, 9);
        typed.record(&[budget(7)], None, 9);
        assert_eq!(Timeline::read(&ext, &journal), typed);
    }

    #[test]
    fn the_head_does_not_grow_with_the_steps() {
        let (mut ext, mut journal) = (BTreeMap::new(), Vec::new());
        let head_size = |ext: &BTreeMap<String, Value>| ext[TIMELINE].to_string().len();
        let mut sizes = Vec::new();
        for i in 0..(MAX_STEPS + 10) {
            let before = journal.len();
            let at = 1_764_000_000_000 + i as i64;
            step(
                &mut ext,
                &mut journal,
                &[budget(100_000 + i as u64)],
                Some("m"),
                at,
            );
            assert_eq!(journal.len(), before + 1, "one point appended per step");
            if [10, 100, 1_000, MAX_STEPS + 9].contains(&i) {
                sizes.push(head_size(&ext));
            }
        }
        // The totals' figures gain digits as they grow, nothing else.
        let (first, last) = (sizes[0], sizes[sizes.len() - 1]);
        assert!(last <= first + 16, "head grew from {first} to {last} bytes");
        assert!(last < 400, "head is {last} bytes");
        // What one step appends stays the same size.
        let record = journal.last().expect("a point").to_string().len();
        assert!(record < 80, "a point is {record} bytes");
    }

    #[test]
    fn a_head_holding_the_whole_timeline_still_reads_and_moves_to_the_journal() {
        // The shape written when the whole timeline rode in the head.
        let mut typed = Timeline::default();
        let compaction = event(
            "context_compaction_end",
            json!({"reason": "tokens", "tokens_before": 900, "tokens_after": 100}),
        );
        typed.record(&[budget(100)], Some("m"), 1);
        typed.record(&[compaction, budget(120)], Some("m"), 2);
        typed.record(&[budget(150)], Some("m"), 3);
        let mut ext = BTreeMap::new();
        ext.insert(
            TIMELINE.to_string(),
            serde_json::to_value(&typed).expect("serializes"),
        );
        assert!(ext[TIMELINE]["steps"].is_array());
        let mut journal = vec![json!("00ff")];
        assert_eq!(Timeline::read(&ext, &journal), typed);
        step(&mut ext, &mut journal, &[budget(170)], None, 4);
        typed.record(&[budget(170)], None, 4);
        assert_eq!(Timeline::read(&ext, &journal), typed);
        assert!(ext[TIMELINE].get("steps").is_none());
        assert!(ext[TIMELINE].get("compactions").is_none());
        assert!(ext[TIMELINE].get("first_step").is_none());
        assert_eq!(journal.len(), 1 + 1 + 4);
        // A field a newer build keeps in the head survives a step.
        if let Some(Value::Object(head)) = ext.get_mut(TIMELINE) {
            head.insert("later".into(), json!(1));
        }
        step(&mut ext, &mut journal, &[budget(180)], None, 5);
        assert_eq!(ext[TIMELINE]["later"], json!(1));
        // The fingerprint, the compaction record, five points.
        assert_eq!(journal.len(), 1 + 1 + 5);
    }

    #[test]
    fn an_unreadable_record_reads_as_empty() {
        let mut ext = BTreeMap::new();
        ext.insert(TIMELINE.to_string(), json!("not a timeline"));
        let journal = vec![
            json!("00ff"),
            json!({"console_step": "not a point"}),
            json!({"another_host": [1, 2]}),
        ];
        assert_eq!(Timeline::read(&ext, &journal), Timeline::default());
    }
}
