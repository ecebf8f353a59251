//! `ctxkeeper-fuzz`: runs the fuzz targets on the stable toolchain.
//!
//! ```text
//! ctxkeeper-fuzz list
//! ctxkeeper-fuzz run TARGET [--seconds N | --runs N] [--corpus DIR]... [--seed N] [--json] [--table-row]
//! ctxkeeper-fuzz repro TARGET FILE...
//! ctxkeeper-fuzz corpus [--traces DIR] [--out DIR]
//! ```
//!
//! Exit status: 0 when every input passed, 1 when a target panicked (the input is written to
//! `fuzz/artifacts/<target>/crash-<hash>`), 2 when an input ran past `--timeout`
//! (`timeout-<hash>`), 64 for a usage error.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use ctxkeeper_fuzz::runner::{self, Options};
use ctxkeeper_fuzz::{TARGETS, Target, corpus, target};

#[derive(Debug, Parser)]
#[command(
    name = "ctxkeeper-fuzz",
    about = "Fuzz ctxkeeper's parsers, importers, capsule and summary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The targets, with what each asserts.
    List,
    /// Mutates a corpus and runs a target until the time or the number of inputs is reached.
    Run {
        target: String,
        /// Stop after this many seconds (60 when neither this nor --runs is given).
        #[arg(long)]
        seconds: Option<f64>,
        /// Stop after this many inputs.
        #[arg(long)]
        runs: Option<u64>,
        /// Corpus directories (default fuzz/corpus/TARGET).
        #[arg(long)]
        corpus: Vec<PathBuf>,
        /// Where failing inputs are written, under TARGET/.
        #[arg(long, default_value = "fuzz/artifacts")]
        artifacts: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Mutated inputs are cut to this many bytes.
        #[arg(long, default_value_t = 64 * 1024)]
        max_len: usize,
        /// Seconds one input may run before the run stops as a hang.
        #[arg(long, default_value_t = 20)]
        timeout: u64,
        /// Print the report as one JSON line on stdout.
        #[arg(long)]
        json: bool,
        /// Print the report as one row of bench/RESULTS.md's fuzzing table on stdout (after
        /// the JSON line, if both are asked for).
        #[arg(long)]
        table_row: bool,
    },
    /// Runs a target on the given files, as they are (a crash found earlier).
    Repro { target: String, files: Vec<PathBuf> },
    /// Cuts the seed corpus out of trace files.
    Corpus {
        /// The shared traces.
        #[arg(
            long,
            default_value = "../shared/data/traces",
            env = "CTXKEEPER_TRACES"
        )]
        traces: PathBuf,
        #[arg(long, default_value = "fuzz/corpus")]
        out: PathBuf,
        /// Bytes the trace cuts of one target may take.
        #[arg(long, default_value_t = 280 * 1024)]
        max_bytes: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::List => {
            for t in &TARGETS {
                println!("{:<20} {}", t.name, t.about);
            }
            0
        }
        Command::Run {
            target: name,
            seconds,
            runs,
            corpus,
            artifacts,
            seed,
            max_len,
            timeout,
            json,
            table_row,
        } => {
            let target = known(&name);
            let dirs = if corpus.is_empty() {
                vec![PathBuf::from("fuzz/corpus").join(target.name)]
            } else {
                corpus
            };
            let inputs = match runner::load_corpus(&dirs) {
                Ok(inputs) => inputs,
                Err(err) => usage(&format!("cannot read the corpus {dirs:?}: {err}")),
            };
            let duration = match (seconds, runs) {
                (None, None) => Some(Duration::from_secs(60)),
                (seconds, _) => seconds.map(Duration::from_secs_f64),
            };
            let options = Options {
                duration,
                max_runs: runs,
                seed,
                max_len,
                artifacts: Some(artifacts),
                timeout: Some(Duration::from_secs(timeout)),
                progress: Some(Duration::from_secs(10)),
            };
            let report = runner::run(target, &inputs, &options);
            eprintln!(
                "ctxkeeper-fuzz: {}: {} inputs in {:.1} s ({:.0}/s), corpus {}, {} crashes",
                report.target,
                report.runs,
                report.elapsed.as_secs_f64(),
                report.runs_per_second(),
                report.corpus,
                usize::from(report.crash.is_some())
            );
            if json {
                println!("{}", report.to_json());
            }
            if table_row {
                println!("{}", report.table_row());
            }
            match &report.crash {
                Some(crash) => {
                    eprintln!("{}", crash.message);
                    if let Some(path) = &crash.artifact {
                        eprintln!(
                            "input written to {} (ctxkeeper-fuzz repro {} {0})",
                            path.display(),
                            target.name
                        );
                    }
                    1
                }
                None => 0,
            }
        }
        Command::Repro {
            target: name,
            files,
        } => {
            let target = known(&name);
            let mut failed = 0;
            for file in &files {
                let input = std::fs::read(file)
                    .unwrap_or_else(|err| usage(&format!("{}: {err}", file.display())));
                match runner::run_one(target, &input) {
                    Ok(()) => eprintln!("{}: passes", file.display()),
                    Err(message) => {
                        failed += 1;
                        eprintln!("{}: {message}", file.display());
                    }
                }
            }
            i32::from(failed > 0)
        }
        Command::Corpus {
            traces,
            out,
            max_bytes,
        } => match corpus::build(&traces, &out, max_bytes) {
            Ok(written) => {
                for (target, (files, bytes)) in written {
                    println!("{target:<20} {files:>4} files {bytes:>9} bytes");
                }
                0
            }
            Err(err) => {
                eprintln!("ctxkeeper-fuzz: corpus: {err}");
                1
            }
        },
    };
    std::process::exit(code);
}

fn known(name: &str) -> &'static Target {
    target(name).unwrap_or_else(|| {
        let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
        usage(&format!(
            "unknown target {name:?} (one of {})",
            names.join(", ")
        ))
    })
}

fn usage(message: &str) -> ! {
    eprintln!("ctxkeeper-fuzz: {message}");
    std::process::exit(64);
}
