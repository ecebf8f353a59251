//! Seed conformance through the product: for each section of the five seed documents
//! (`../shared/seeds/`), the behaviour a preset must show, checked on the `ctxkeeper` binary
//! (`config show`, `replay`, `sessions`), never on the library alone: the documented value
//! against the value observed. Every row must match.
//!
//! Each row also names the command that shows the behaviour (the last `ctxkeeper` invocation
//! before the row was observed, with scratch paths cut to their file names), so a reader can
//! run it on a generated conversation of the same shape.
//!
//! With `CTXKEEPER_CONFORMANCE_OUT=FILE` the table is also written to FILE as Markdown (it is
//! the "Seed conformance" section of `bench/RESULTS.md`).

#[path = "seeds/agentrail.rs"]
mod agentrail;
#[path = "seeds/agentscope.rs"]
mod agentscope;
#[path = "seeds/common.rs"]
mod common;
#[path = "seeds/cowagent.rs"]
mod cowagent;
#[path = "seeds/harness.rs"]
mod harness;
#[path = "seeds/reme.rs"]
mod reme;

use common::Table;

#[test]
fn seed_conformance_table() {
    let mut table = Table::default();
    agentscope::rows(&mut table);
    reme::rows(&mut table);
    agentrail::rows(&mut table);
    cowagent::rows(&mut table);
    harness::rows(&mut table);

    let markdown = table.markdown();
    if let Some(path) = std::env::var_os("CTXKEEPER_CONFORMANCE_OUT") {
        std::fs::write(path, &markdown).expect("write the table");
    }
    eprintln!("{markdown}");
    let mismatched: Vec<String> = table
        .rows
        .iter()
        .filter(|r| r.documented != r.observed)
        .map(|r| {
            format!(
                "{} / {} / {}: documented {}, observed {}",
                r.seed, r.preset, r.behaviour, r.documented, r.observed
            )
        })
        .collect();
    assert!(mismatched.is_empty(), "{mismatched:#?}");
}
