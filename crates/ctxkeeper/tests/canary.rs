//! The canary suite: generated long sessions (chat-heavy and agentic, 64 user turns) with
//! planted standing orders of the five kinds (rules, constraints, facts, preferences, the goal
//! state) at random, seeded positions, some later superseded. After every compaction of the
//! growing session, at a window of 30 % of the transcript's tokens under `default`, a probe
//! checks that each item's exact value is still in the request the model gets, and that no
//! superseded value is presented as current. With `[policy.capsule] standing_orders = false`
//! the same sessions lose items: the suite can fail.

#![allow(clippy::unwrap_used)] // a failed step in a test should panic with its location

use std::collections::BTreeMap;

use ctxkeeper::Settings;
use ctxkeeper::core::capsule::ORDERS_HEADING;
use ctxkeeper::core::engine::{PolicyConfig, presets};
use ctxkeeper::core::model::{Message, Part};
use ctxkeeper::core::tokens::{Profiles, TokenModel};

mod common;

use common::{Rng, in_memory};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Rule,
    Constraint,
    Fact,
    Preference,
    Goal,
}

/// A planted statement: the text the user writes, the exact value a probe looks for, and
/// the later update that supersedes it, if any.
#[derive(Debug, Clone)]
struct Item {
    kind: Kind,
    turn: usize,
    text: String,
    value: String,
    update: Option<(usize, String, String)>,
}

/// A template: (kind, text, value, update text, new value), with `{v}` / `{w}` filled.
type Make = fn(&mut Rng) -> (Kind, String, String, Option<(String, String)>);

const ZONES: [&str; 6] = [
    "America/Los_Angeles",
    "Europe/Berlin",
    "Asia/Tokyo",
    "America/New_York",
    "Australia/Sydney",
    "Europe/Lisbon",
];
const LANGS: [&str; 5] = ["Python", "Rust", "Go", "TypeScript", "Kotlin"];
const CODES: [&str; 6] = [
    "BLUEJAY", "QUASAR", "MARLIN", "NIMBUS", "KESTREL", "OBSIDIAN",
];
const NAMES: [&str; 5] = [
    "Priya Raman",
    "Tomas Novak",
    "Aiko Sato",
    "Lena Fischer",
    "Omar Haddad",
];
const FEATURES: [&str; 5] = ["billing", "search", "onboarding", "audit-log", "export"];

fn two<'a>(rng: &mut Rng, items: &'a [&'a str]) -> (&'a str, &'a str) {
    let a = rng.index(items.len());
    let b = (a + 1 + rng.index(items.len() - 1)) % items.len();
    (items[a], items[b])
}

fn templates() -> Vec<Make> {
    vec![
        // Rules: the value is the rule itself.
        |_| {
            let t = "Never reveal API keys or passwords in any answer.".to_string();
            (Kind::Rule, t.clone(), t, None)
        },
        |_| {
            let t = "Always include a rollback step in every deployment plan.".to_string();
            (Kind::Rule, t.clone(), t, None)
        },
        |_| {
            let t = "Do not run database migrations without asking me first.".to_string();
            (Kind::Rule, t.clone(), t, None)
        },
        |rng| {
            let dir = rng.pick(&["vendor", "migrations", "secrets", "fixtures"]);
            let t = format!("Never delete anything under the {dir}/ directory.");
            (Kind::Rule, t.clone(), t, None)
        },
        |rng| {
            let n = 1000 + rng.index(9000);
            let t = format!("You must tag every release note with ticket OPS-{n}.");
            (Kind::Rule, t, format!("OPS-{n}"), None)
        },
        // Constraints.
        |rng| {
            let (a, b) = two(rng, &ZONES);
            (
                Kind::Constraint,
                format!("All times in {a}."),
                a.to_string(),
                Some((
                    format!("Actually, switch all times to {b} from now on."),
                    b.to_string(),
                )),
            )
        },
        |rng| {
            let a = 2 + rng.index(7);
            let b = a + 1 + rng.index(5);
            (
                Kind::Constraint,
                format!("The budget cap is ${a},000."),
                format!("${a},000"),
                Some((
                    format!("Update: the budget cap is now ${b},500."),
                    format!("${b},500"),
                )),
            )
        },
        |rng| {
            let a = 100 + 50 * rng.index(4);
            let b = a + 100;
            (
                Kind::Constraint,
                format!("Keep every answer under {a} words."),
                format!("{a} words"),
                Some((
                    format!("From now on keep answers under {b} words."),
                    format!("{b} words"),
                )),
            )
        },
        |rng| {
            let d = 10 + rng.index(18);
            let e = d + 1;
            (
                Kind::Constraint,
                format!("The launch deadline is 2027-03-{d}."),
                format!("2027-03-{d}"),
                Some((
                    format!("Change of plan: the launch deadline moves to 2027-04-{e}."),
                    format!("2027-04-{e}"),
                )),
            )
        },
        |rng| {
            let n = 30 + rng.index(90);
            (
                Kind::Constraint,
                format!("The API rate limit is {n} requests per minute."),
                format!("{n} requests per minute"),
                None,
            )
        },
        // Facts.
        |rng| {
            let (a, b) = two(rng, &CODES);
            (
                Kind::Fact,
                format!("The project codename is {a}."),
                a.to_string(),
                Some((
                    format!("Correction: the project codename is now {b}."),
                    b.to_string(),
                )),
            )
        },
        |rng| {
            let n = 10_000 + rng.index(90_000);
            (
                Kind::Fact,
                format!("My employee ID is EMP-{n}."),
                format!("EMP-{n}"),
                None,
            )
        },
        |rng| {
            let n = 2 + rng.index(20);
            (
                Kind::Fact,
                format!("The staging host is staging-{n}.internal."),
                format!("staging-{n}.internal"),
                None,
            )
        },
        |rng| {
            let n = 100 + rng.index(900);
            (
                Kind::Fact,
                format!("Our customer reference is CR-{n}-77."),
                format!("CR-{n}-77"),
                None,
            )
        },
        |rng| {
            let (a, b) = two(rng, &NAMES);
            (
                Kind::Fact,
                format!("The on-call engineer this week is {a}."),
                a.to_string(),
                Some((
                    format!("Update: the on-call engineer is now {b}."),
                    b.to_string(),
                )),
            )
        },
        // Preferences.
        |rng| {
            let (a, b) = two(rng, &LANGS);
            let c = LANGS.iter().find(|l| **l != a && **l != b).unwrap();
            (
                Kind::Preference,
                format!("Code examples in {a}, not {b}."),
                format!("Code examples in {a}"),
                Some((
                    format!("From now on I'd rather see code examples in {c}."),
                    format!("code examples in {c}"),
                )),
            )
        },
        |_| {
            let t = "I prefer Vega-Lite over matplotlib for charts.".to_string();
            (
                Kind::Preference,
                t,
                "Vega-Lite over matplotlib".into(),
                None,
            )
        },
        |_| {
            let t = "Please use British spelling in all documents.".to_string();
            (Kind::Preference, t.clone(), t, None)
        },
        |_| {
            let t = "I'd like short bullet lists rather than long paragraphs.".to_string();
            (Kind::Preference, t.clone(), t, None)
        },
        // Goal state.
        |rng| {
            let f = rng.pick(&FEATURES);
            (
                Kind::Goal,
                format!("We are working on the {f} migration this sprint."),
                format!("{f} migration"),
                None,
            )
        },
        |_| {
            (
                Kind::Goal,
                "Open question awaiting me: should we enable strict mode by default?".into(),
                "enable strict mode by default".into(),
                Some((
                    "Resolved: strict mode stays off by default.".into(),
                    "strict mode stays off by default".into(),
                )),
            )
        },
        |rng| {
            let f = rng.pick(&FEATURES);
            let n = 3 + rng.index(9);
            (
                Kind::Goal,
                format!("The goal is to ship the {f} beta to {n} pilot customers."),
                format!("{f} beta to {n} pilot customers"),
                None,
            )
        },
    ]
}

const SMALL_TALK: [&str; 24] = [
    "The dashboard mock shows latency p50 and p95 side by side.",
    "Can you suggest a better name for the metrics page?",
    "What do you think about the color scheme on the settings screen?",
    "Thanks, that helps a lot.",
    "Let's look at the onboarding copy next.",
    "How would you structure the README for new contributors?",
    "I had a long meeting this morning, sorry for the delay.",
    "The chart on the home page feels a bit crowded.",
    "Could you explain how the retry logic works again?",
    "Nice, that reads much better now.",
    "Remind me what the difference between the two queues was?",
    "The design team liked the second layout more.",
    "I'm not sure the tooltip text is clear enough.",
    "What would a good empty state look like for the reports tab?",
    "Let's take a short detour and talk about logging.",
    "The demo went fine yesterday, people asked about exports.",
    "Can you rewrite that paragraph to be friendlier?",
    "Is there a simpler way to phrase the error message?",
    "Good point about caching, let's keep that in mind.",
    "What are the trade-offs of server-side rendering here?",
    "The sidebar icons look slightly blurry on my screen.",
    "Could you draft three subject lines for the newsletter?",
    "I wonder whether users read the changelog at all.",
    "Let's pause on this and move to the pricing page.",
];

const REPLIES: [&str; 8] = [
    "Sure. Here is a suggestion with a short explanation of the reasoning behind it, keeping the tone consistent with the rest of the product and leaving room for your feedback.",
    "Good question. In short, it depends on how often the data changes; I would start simple and measure before adding anything more elaborate.",
    "Understood. I have noted that and will take it into account in what follows.",
    "Here is a revised version; I kept the structure and changed only the wording where it was unclear.",
    "That makes sense. A small change now will save a larger refactor later, so I would do it in this iteration.",
    "I would group these into three sections and put the most common action first, since that is what most people come for.",
    "There are two reasonable options; the first is cheaper to build, the second is easier to extend. I lean towards the first for now.",
    "Done. Let me know if you want a shorter or a more formal variant of it.",
];

struct Session {
    /// Per user turn: the user's text and the messages that follow it (assistant, tools).
    turns: Vec<(String, Vec<Message>)>,
    items: Vec<Item>,
}

fn session(seed: u64, agentic: bool) -> Session {
    const TURNS: usize = 64;
    let mut rng = Rng(seed);
    let makers = templates();
    let mut order: Vec<usize> = (0..makers.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.index(i + 1));
    }
    // Every template once (22 items), at distinct random turns.
    let mut slots: Vec<usize> = (1..TURNS - 6).collect();
    for i in (1..slots.len()).rev() {
        slots.swap(i, rng.index(i + 1));
    }
    let mut items = Vec::new();
    for (n, &at) in order.iter().enumerate() {
        let (kind, text, value, update) = makers[at](&mut rng);
        let turn = slots[n];
        let update = update.map(|(text, value)| {
            let when = turn + 4 + rng.index(TURNS - turn - 4);
            (when, text, value)
        });
        items.push(Item {
            kind,
            turn,
            text,
            value,
            update,
        });
    }
    let mut turns = Vec::new();
    for turn in 0..TURNS {
        let mut said: Vec<String> = Vec::new();
        if rng.index(2) == 0 || turn == 0 {
            said.push(rng.pick(&SMALL_TALK).to_string());
        }
        for item in &items {
            if item.turn == turn {
                said.push(item.text.clone());
            }
            if let Some((when, text, _)) = &item.update
                && *when == turn
            {
                said.push(text.clone());
            }
        }
        if rng.index(3) == 0 {
            said.push(rng.pick(&SMALL_TALK).to_string());
        }
        if agentic && rng.index(3) != 0 {
            // What users of coding agents paste: a failing run's output, in a code block.
            let mut paste = String::from("Here is what I get when I run it:\n```\n");
            for line in 0..8 + rng.index(12) {
                paste.push_str(&format!(
                    "  File \"src/module_{}/handler_{}.py\", line {}, in step_{line}\n",
                    rng.index(12),
                    rng.index(40),
                    10 + rng.index(400)
                ));
            }
            paste.push_str("ValueError: retry budget exhausted\n```");
            // Pasted before or after what the user says about it.
            if rng.index(2) == 0 {
                said.insert(0, paste);
            } else {
                said.push(paste);
            }
        }
        let mut after = Vec::new();
        if agentic {
            for round in 0..1 + rng.index(2) {
                let id = format!("call_{turn}_{round}");
                let file = format!("src/module_{}/handler_{}.py", rng.index(12), rng.index(40));
                after.push(Message::assistant_with_calls(
                    "Let me look at the code first.",
                    vec![Part::tool_call(
                        &id,
                        "shell",
                        format!(r#"{{"command":"sed -n '1,80p' {file}"}}"#),
                    )],
                ));
                let mut output = String::new();
                for line in 0..40 + rng.index(60) {
                    output.push_str(&format!(
                        "    def step_{line}(self, value_{n}):  # TODO: handle retries {n}\n",
                        n = rng.index(1000)
                    ));
                }
                after.push(Message::tool_result(&id, output));
            }
        }
        after.push(Message::assistant(rng.pick(&REPLIES).to_string()));
        // A paste sits on lines of its own; sentences run on in one paragraph.
        turns.push((said.join(if agentic { "\n" } else { " " }), after));
    }
    Session { turns, items }
}

/// Everything the model reads in a request, as one text.
fn request_text(messages: &[Message]) -> String {
    let mut out = String::new();
    for message in messages {
        for part in &message.parts {
            match part {
                Part::Text { text, .. } => out.push_str(text),
                Part::ToolResult { content, .. } => {
                    for inner in content {
                        if let Part::Text { text, .. } = inner {
                            out.push_str(text);
                        }
                    }
                }
                Part::ToolCall { arguments, .. } => out.push_str(arguments),
                _ => {}
            }
            out.push('\n');
        }
    }
    out
}

/// The lines the standing orders present as current (the capsule's first section).
fn current_orders(text: &str) -> &str {
    let Some(start) = text.find(ORDERS_HEADING) else {
        return "";
    };
    let rest = &text[start + ORDERS_HEADING.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

#[derive(Debug, Default)]
struct Tally {
    /// kind → (kept, probed) over every compaction.
    kept: BTreeMap<Kind, (usize, usize)>,
    /// The smallest share of a kind kept after any one compaction.
    worst: BTreeMap<Kind, f64>,
    stale_as_current: usize,
    compactions: usize,
    /// The window the session ran in, in tokens.
    window: u64,
    /// Which session and setting.
    label: String,
    /// The last compacted request, as the model reads it.
    last: String,
}

fn probe(session: &Session, turn: usize, text: &str, tally: &mut Tally) {
    let mut round: BTreeMap<Kind, (usize, usize)> = BTreeMap::new();
    let orders = current_orders(text);
    for item in &session.items {
        if item.turn > turn {
            continue;
        }
        let (value, stale) = match &item.update {
            Some((when, _, new)) if *when <= turn => (new.as_str(), Some(item.value.as_str())),
            _ => (item.value.as_str(), None),
        };
        let kept = text.contains(value);
        if !kept && std::env::var_os("CANARY_SHOW").is_some() {
            eprintln!(
                "---- missing ({}) at turn {turn}: {:?} {value:?}",
                tally.label, item.kind
            );
        }
        let entry = round.entry(item.kind).or_default();
        entry.0 += usize::from(kept);
        entry.1 += 1;
        if let Some(old) = stale {
            // Presented as current: listed among the current orders, or shown without the
            // value that replaced it.
            if orders.contains(old) || (text.contains(old) && !kept) {
                tally.stale_as_current += 1;
                if std::env::var_os("CANARY_SHOW").is_some() {
                    let at = text.find(old).unwrap_or(0);
                    let from = text.floor_char_boundary(at.saturating_sub(150));
                    let to = text.ceil_char_boundary((at + 150).min(text.len()));
                    eprintln!(
                        "---- stale {old:?} (current {value:?}) ----\n{}",
                        &text[from..to]
                    );
                }
            }
        }
    }
    for (kind, (kept, probed)) in round {
        let total = tally.kept.entry(kind).or_default();
        total.0 += kept;
        total.1 += probed;
        let share = kept as f64 / probed as f64;
        let worst = tally.worst.entry(kind).or_insert(1.0);
        *worst = worst.min(share);
    }
    tally.compactions += 1;
    tally.last = text.to_string();
}

fn policy(standing_orders: bool) -> PolicyConfig {
    let mut policy = presets::preset("default").unwrap();
    if let Some(capsule) = policy.capsule.as_mut() {
        capsule.standing_orders = standing_orders;
    }
    policy
}

async fn run(seed: u64, agentic: bool, standing_orders: bool) -> Tally {
    let session = session(seed, agentic);
    let model = TokenModel::for_model("gpt-4o", &Profiles::builtin());
    let system = Message::system("You are a helpful assistant for a small product team.");
    let mut all = vec![system.clone()];
    for (said, after) in &session.turns {
        all.push(Message::user(said.clone()));
        all.extend(after.iter().cloned());
    }
    let transcript = model.messages_tokens(&all);
    let settings = Settings {
        policy: policy(standing_orders),
        model,
        window: transcript * 3 / 10,
        fixed_tokens: 0,
    };
    let mut context = in_memory(settings, "canary");
    context.ingest(system).await.unwrap();
    let mut tally = Tally {
        window: transcript * 3 / 10,
        label: format!("agentic {agentic}, seed {seed}, orders {standing_orders}"),
        ..Tally::default()
    };
    for (turn, (said, after)) in session.turns.iter().enumerate() {
        context.ingest(Message::user(said.clone())).await.unwrap();
        for message in after {
            if message.role == ctxkeeper::core::model::Role::Assistant {
                // The agent asks the model: this is the request a probe reads.
                let prepared = context.prepare().await.unwrap();
                if prepared.compacted {
                    probe(
                        &session,
                        turn,
                        &request_text(&prepared.messages),
                        &mut tally,
                    );
                }
            }
            context.ingest(message.clone()).await.unwrap();
        }
    }
    tally
}

fn report(name: &str, tally: &Tally) -> String {
    let kinds: Vec<String> = tally
        .kept
        .iter()
        .map(|(kind, (kept, probed))| {
            format!(
                "{kind:?} {kept}/{probed} (worst {:.2})",
                tally.worst.get(kind).copied().unwrap_or(1.0)
            )
        })
        .collect();
    format!(
        "{name}: window {}, {} compactions, {}; superseded shown as current: {}",
        tally.window,
        tally.compactions,
        kinds.join(", "),
        tally.stale_as_current
    )
}

#[tokio::test]
async fn standing_orders_survive_every_compaction_and_their_absence_shows() {
    let mut lines = Vec::new();
    for agentic in [false, true] {
        for seed in [7_u64, 1_234, 99_991] {
            let shape = if agentic { "agentic" } else { "chat-heavy" };
            let on = run(seed, agentic, true).await;
            let off = run(seed, agentic, false).await;
            lines.push(report(&format!("{shape} seed {seed} orders on"), &on));
            lines.push(report(&format!("{shape} seed {seed} orders off"), &off));
            if seed == 7 && !agentic && std::env::var_os("CANARY_SHOW").is_some() {
                eprintln!(
                    "---- last compacted request ({shape}, seed {seed}) ----\n{}",
                    on.last
                );
            }
            assert!(on.compactions >= 5, "{}", lines.join("\n"));
            for (kind, worst) in &on.worst {
                assert!(*worst >= 0.95, "{kind:?}: {worst}\n{}", lines.join("\n"));
            }
            assert_eq!(on.stale_as_current, 0, "{}", lines.join("\n"));
            // Without the standing orders the same session loses items or shows stale values.
            let lost = off.worst.values().any(|w| *w < 0.95) || off.stale_as_current > 0;
            assert!(lost, "orders off kept everything:\n{}", lines.join("\n"));
        }
    }
    eprintln!("{}", lines.join("\n"));
}
