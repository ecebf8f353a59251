//! Every fuzz target over its hand-written seeds (`fuzz/corpus/<target>/`), the seeds cut from
//! the shared traces when they are present, and a few thousand
//! seeded mutations of it, so that `cargo test` catches a regression the fuzzers found once;
//! and the runner itself: a panicking target's input is written out and reported.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ctxkeeper_fuzz::runner::{self, Options, artifact_name};
use ctxkeeper_fuzz::{TARGETS, Target};

/// Mutated inputs per target: a few seconds for all of them in a test build.
const RUNS: u64 = 1_500;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// The shared agent traces (`CTXKEEPER_TRACES`, else `../shared/data/traces` beside the
/// project): the seeds cut from them are built for the run, never kept in the project.
fn traces_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("CTXKEEPER_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/traces")
        });
    dir.is_dir().then_some(dir)
}

#[test]
fn every_target_passes_its_corpus_and_seeded_mutations() {
    let cut = traces_dir().map(|traces| {
        let out =
            std::env::temp_dir().join(format!("ctxkeeper-fuzz-corpus-{}", std::process::id()));
        ctxkeeper_fuzz::corpus::build(&traces, &out, 286_720)
            .expect("the seeds cut from the traces");
        out
    });
    if cut.is_none() {
        eprintln!(
            "SKIP: no shared traces (CTXKEEPER_TRACES): the targets run over the hand-written seeds only"
        );
    }
    for target in &TARGETS {
        let mut dirs = vec![corpus_dir(target.name)];
        dirs.extend(cut.as_ref().map(|out| out.join(target.name)));
        let corpus = runner::load_corpus(&dirs).expect("the corpus");
        let least = if cut.is_some() { 4 } else { 2 };
        assert!(
            corpus.len() >= least,
            "{}: only {} corpus inputs",
            target.name,
            corpus.len()
        );
        let options = Options {
            max_runs: Some(corpus.len() as u64 + RUNS),
            seed: 20_250_601,
            ..Options::default()
        };
        let report = runner::run(target, &corpus, &options);
        if let Some(crash) = &report.crash {
            let input = String::from_utf8_lossy(&crash.input);
            panic!("{}: {}\ninput: {input:?}", target.name, crash.message);
        }
        assert_eq!(report.runs, corpus.len() as u64 + RUNS, "{}", target.name);
    }
}

/// Fails on inputs holding `boom`; the runner must find one from a corpus that does not.
fn boom(data: &[u8]) {
    assert!(!data.windows(4).any(|w| w == b"boom"), "found the bomb");
}

static BOOM: Target = Target {
    name: "boom",
    about: "panics on `boom`",
    run: boom,
    dictionary: &[b"boom"],
    json: false,
};

#[test]
fn a_panicking_input_is_written_out_and_reported() {
    let artifacts =
        std::env::temp_dir().join(format!("ctxkeeper-fuzz-test-{}", std::process::id()));
    let options = Options {
        duration: Some(Duration::from_secs(20)),
        max_runs: None,
        seed: 7,
        artifacts: Some(artifacts.clone()),
        ..Options::default()
    };
    let report = runner::run(&BOOM, &[b"a harmless input".to_vec()], &options);
    let crash = report.crash.expect("the dictionary token is inserted soon");
    assert!(
        crash.message.contains("found the bomb"),
        "{}",
        crash.message
    );
    let path = crash.artifact.expect("written");
    assert_eq!(
        path,
        artifacts
            .join("boom")
            .join(artifact_name("crash", &crash.input))
    );
    assert_eq!(std::fs::read(&path).expect("readable"), crash.input);
    assert_eq!(
        runner::run_one(&BOOM, &crash.input).map_err(|m| m.contains("found the bomb")),
        Err(true)
    );
    std::fs::remove_dir_all(&artifacts).expect("cleaned up");
}

/// cargo-fuzz needs nightly, so `cargo test` cannot build its harnesses; it checks that every
/// target has one, declared in `fuzz/Cargo.toml` and calling a function of this crate.
#[test]
fn every_target_has_a_cargo_fuzz_harness() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for target in &TARGETS {
        let harness =
            std::fs::read_to_string(fuzz.join(format!("fuzz_targets/{}.rs", target.name)))
                .unwrap_or_else(|err| panic!("{}: no harness: {err}", target.name));
        assert!(
            harness.contains("ctxkeeper_fuzz::targets::"),
            "{}: the harness calls no target",
            target.name
        );
        assert!(
            manifest.contains(&format!("name = \"{}\"", target.name)),
            "{}: not a [[bin]] of fuzz/Cargo.toml",
            target.name
        );
    }
}
