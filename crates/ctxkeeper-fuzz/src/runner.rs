//! The stable-toolchain fuzzer: no coverage guidance, just many mutated inputs, fast.
//!
//! A run first feeds every corpus input as it is, then mutations of them
//! ([`crate::mutate`]): each starts from a corpus input or, one time in three, from one of the
//! last inputs run, so edits compound. A target that panics stops the run; its input is
//! written to `<artifacts>/<target>/crash-<hash>` and the report says what broke. An input
//! that runs longer than the timeout is written as `timeout-<hash>` and ends the process
//! (a running target cannot be interrupted).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use ctxkeeper_core::stats::thousands;
use sha2::{Digest, Sha256};

use crate::Target;
use crate::mutate::{Rng, mutate};

/// How long and how a run goes.
#[derive(Debug, Clone)]
pub struct Options {
    /// Stop after this long (the corpus inputs always run).
    pub duration: Option<Duration>,
    /// Stop after this many inputs.
    pub max_runs: Option<u64>,
    pub seed: u64,
    /// Mutated inputs are cut to this many bytes.
    pub max_len: usize,
    /// Where failing inputs are written (`<artifacts>/<target>/`); `None` writes nothing.
    pub artifacts: Option<PathBuf>,
    /// An input running longer than this ends the process (`None`: no watchdog).
    pub timeout: Option<Duration>,
    /// Print progress to stderr every this often.
    pub progress: Option<Duration>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            duration: None,
            max_runs: Some(1_000),
            seed: 0,
            max_len: 64 * 1024,
            artifacts: None,
            timeout: None,
            progress: None,
        }
    }
}

/// A target's panic and the input that caused it.
#[derive(Debug, Clone)]
pub struct Crash {
    pub input: Vec<u8>,
    /// The panic message with its location.
    pub message: String,
    /// Where the input was written.
    pub artifact: Option<PathBuf>,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub elapsed: Duration,
    /// Inputs run, the corpus included.
    pub runs: u64,
    pub corpus: usize,
    pub crash: Option<Crash>,
}

impl Report {
    pub fn runs_per_second(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// One JSON line for scripts (`bench/fuzz.sh`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "target": self.target,
            "seconds": (self.elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "runs": self.runs,
            "runs_per_second": self.runs_per_second().round(),
            "corpus": self.corpus,
            "crashes": usize::from(self.crash.is_some()),
            "artifact": self.crash.as_ref().and_then(|c| c.artifact.as_ref()).map(|p| p.display().to_string()),
        })
    }
}

impl Report {
    /// `| target | seconds | execs | execs/s | crashes |`, the table of bench/RESULTS.md.
    pub fn table_row(&self) -> String {
        format!(
            "| `{}` | {:.0} | {} | {} | {} |",
            self.target,
            self.elapsed.as_secs_f64(),
            thousands(self.runs),
            thousands(self.runs_per_second().round() as u64),
            usize::from(self.crash.is_some())
        )
    }
}

/// The files of the corpus directories (not recursive), in name order.
pub fn load_corpus(dirs: &[PathBuf]) -> std::io::Result<Vec<Vec<u8>>> {
    let mut paths = Vec::new();
    for dir in dirs {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_file() {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths.iter().map(std::fs::read).collect()
}

thread_local! {
    /// `Some` while this thread runs a target: the panic hook stores the message there
    /// instead of printing it.
    static CAPTURED: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
}

/// Installs (once per process) a panic hook that is silent on a thread running a target and
/// the usual hook elsewhere.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let captured = CAPTURED.with(|slot| match slot.borrow_mut().as_mut() {
                Some(message) => {
                    *message = Some(info.to_string());
                    true
                }
                None => false,
            });
            if !captured {
                default(info);
            }
        }));
    });
}

/// Runs one input; the panic message when the target panicked.
pub fn run_one(target: &Target, input: &[u8]) -> Result<(), String> {
    install_panic_hook();
    CAPTURED.with(|slot| *slot.borrow_mut() = Some(None));
    let outcome = std::panic::catch_unwind(|| (target.run)(input));
    let message = CAPTURED.with(|slot| slot.borrow_mut().take().flatten());
    match outcome {
        Ok(()) => Ok(()),
        Err(_) => Err(message.unwrap_or_else(|| "a panic without a message".to_string())),
    }
}

/// The file name of a failing input: its kind and the start of its SHA-256.
pub fn artifact_name(kind: &str, input: &[u8]) -> String {
    format!("{kind}-{}", &hex::encode(Sha256::digest(input))[..16])
}

fn write_artifact(dir: &Path, target: &str, kind: &str, input: &[u8]) -> Option<PathBuf> {
    let dir = dir.join(target);
    let path = dir.join(artifact_name(kind, input));
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, input));
    match written {
        Ok(()) => Some(path),
        Err(err) => {
            eprintln!("ctxkeeper-fuzz: cannot write {}: {err}", path.display());
            None
        }
    }
}

/// The input running now, for the watchdog.
struct Watched {
    input: Mutex<Vec<u8>>,
    /// Milliseconds since the run started at which the current input started; 0 between inputs.
    started_ms: AtomicU64,
    done: AtomicBool,
}

fn start_watchdog(target: &'static str, options: &Options, start: Instant) -> Option<Arc<Watched>> {
    let timeout = options.timeout?;
    let watched = Arc::new(Watched {
        input: Mutex::new(Vec::new()),
        started_ms: AtomicU64::new(0),
        done: AtomicBool::new(false),
    });
    let shared = watched.clone();
    let artifacts = options.artifacts.clone();
    std::thread::spawn(move || {
        while !shared.done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(250));
            let started = shared.started_ms.load(Ordering::Relaxed);
            let now = start.elapsed().as_millis() as u64;
            if started != 0 && now.saturating_sub(started) > timeout.as_millis() as u64 {
                let input = shared.input.lock().map(|i| i.clone()).unwrap_or_default();
                let written = artifacts
                    .as_deref()
                    .and_then(|dir| write_artifact(dir, target, "timeout", &input));
                eprintln!(
                    "ctxkeeper-fuzz: {target}: an input ran longer than {} s{}",
                    timeout.as_secs(),
                    written.map_or(String::new(), |p| format!("; written to {}", p.display()))
                );
                std::process::exit(2);
            }
        }
    });
    Some(watched)
}

/// Fuzzes `target` from `corpus` (an empty input when the corpus is empty).
pub fn run(target: &'static Target, corpus: &[Vec<u8>], options: &Options) -> Report {
    let start = Instant::now();
    let seeds: Vec<Vec<u8>> = if corpus.is_empty() {
        vec![Vec::new()]
    } else {
        corpus.to_vec()
    };
    let mut rng = Rng::new(options.seed);
    let mut recent: Vec<Vec<u8>> = Vec::new();
    const RECENT: usize = 256;
    let watched = start_watchdog(target.name, options, start);
    let mut report = Report {
        target: target.name,
        elapsed: Duration::ZERO,
        runs: 0,
        corpus: corpus.len(),
        crash: None,
    };
    let mut last_progress = Instant::now();
    let mut input = Vec::new();
    loop {
        let index = report.runs as usize;
        if index >= seeds.len() {
            let over_time = options.duration.is_some_and(|d| start.elapsed() >= d);
            let over_runs = options.max_runs.is_some_and(|n| report.runs >= n);
            if over_time || over_runs || (options.duration.is_none() && options.max_runs.is_none())
            {
                break;
            }
            let base = if !recent.is_empty() && rng.one_in(3) {
                &recent[rng.below(recent.len())]
            } else {
                &seeds[rng.below(seeds.len())]
            };
            input.clone_from(base);
            let other = &seeds[rng.below(seeds.len())];
            mutate(
                &mut rng,
                &mut input,
                other,
                target.dictionary,
                target.json,
                options.max_len,
            );
        } else {
            input.clone_from(&seeds[index]);
        }
        if let Some(watched) = &watched {
            if let Ok(mut current) = watched.input.lock() {
                current.clone_from(&input);
            }
            let now = (start.elapsed().as_millis() as u64).max(1);
            watched.started_ms.store(now, Ordering::Relaxed);
        }
        let outcome = run_one(target, &input);
        if let Some(watched) = &watched {
            watched.started_ms.store(0, Ordering::Relaxed);
        }
        report.runs += 1;
        if let Err(message) = outcome {
            let artifact = options
                .artifacts
                .as_deref()
                .and_then(|dir| write_artifact(dir, target.name, "crash", &input));
            report.crash = Some(Crash {
                input: input.clone(),
                message,
                artifact,
            });
            break;
        }
        if index >= seeds.len() {
            if recent.len() < RECENT {
                recent.push(input.clone());
            } else {
                let at = rng.below(RECENT);
                recent[at].clone_from(&input);
            }
        }
        if let Some(every) = options.progress
            && last_progress.elapsed() >= every
        {
            last_progress = Instant::now();
            eprintln!(
                "ctxkeeper-fuzz: {}: {} inputs in {:.0} s ({:.0}/s)",
                target.name,
                report.runs,
                start.elapsed().as_secs_f64(),
                report.runs as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    if let Some(watched) = &watched {
        watched.done.store(true, Ordering::Relaxed);
    }
    report.elapsed = start.elapsed();
    report
}
