//! Fuzz targets for what ctxkeeper reads from outside: the three wire parsers, the trace
//! importers, and the two texts that quote tool output back to the model (the session
//! capsule and the extractive summary).
//!
//! Every target is a plain `fn(&[u8])` that returns when the input is rejected or every
//! property held, and panics when one did not. Two drivers call the same functions:
//!
//! - [`runner`], on the stable toolchain: loads a corpus, mutates it with a seeded random
//!   generator, runs the target under `catch_unwind` and writes a failing input to
//!   `fuzz/artifacts/<target>/crash-<hash>` (the `ctxkeeper-fuzz` binary, `bench/fuzz.sh`,
//!   and the smoke test of `cargo test -p ctxkeeper-fuzz`);
//! - the cargo-fuzz harnesses in `fuzz/fuzz_targets/` (nightly, libFuzzer's coverage
//!   guidance), one per target.
//!
//! ```
//! let target = ctxkeeper_fuzz::target("wire_openai_chat").expect("a target");
//! (target.run)(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
//! ```

pub mod corpus;
pub mod mutate;
pub mod runner;
pub mod session;
pub mod targets;

/// A fuzz target: a name, what it checks, the function, and the tokens its mutator inserts.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The name used on the command line, in `fuzz/corpus/<name>/` and by cargo-fuzz.
    pub name: &'static str,
    /// One line on what it feeds and which properties it asserts.
    pub about: &'static str,
    /// Runs one input; panics when a property does not hold.
    pub run: fn(&[u8]),
    /// Byte strings worth inserting whole (JSON keys and values of the format, forged
    /// headings): a blind mutator rarely spells them by chance.
    pub dictionary: &'static [&'static [u8]],
    /// Whether inputs are JSON (or JSON Lines), so that structure-aware mutations apply.
    pub json: bool,
}

/// Every target, in the order `bench/fuzz.sh` runs them.
pub const TARGETS: [Target; 6] = [
    Target {
        name: "wire_openai_chat",
        about: "OpenAI Chat Completions body: parse, emit back equal, re-parse, convert to the other wires, repair",
        run: targets::wire::openai_chat,
        dictionary: targets::wire::DICTIONARY,
        json: true,
    },
    Target {
        name: "wire_responses",
        about: "OpenAI Responses body: parse, emit back equal, re-parse, convert to the other wires, repair",
        run: targets::wire::responses,
        dictionary: targets::wire::DICTIONARY,
        json: true,
    },
    Target {
        name: "wire_anthropic",
        about: "Anthropic Messages body: parse, emit back equal, re-parse, convert to the other wires, repair",
        run: targets::wire::anthropic,
        dictionary: targets::wire::DICTIONARY,
        json: true,
    },
    Target {
        name: "import_trace",
        about: "a trace file: detect, import in every format, concat, repair every session",
        run: targets::import::import_trace,
        dictionary: targets::import::DICTIONARY,
        json: true,
    },
    Target {
        name: "capsule",
        about: "a session with forged headings in tool output and agent text: the capsule's sections are its own, each once",
        run: targets::capsule::capsule,
        dictionary: session::DICTIONARY,
        json: false,
    },
    Target {
        name: "extractive_summary",
        about: "the same sessions summarized without a model: the rendered summary's sections are its schema's, each once",
        run: targets::summary::extractive_summary,
        dictionary: session::DICTIONARY,
        json: false,
    },
];

/// The target of that name.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
