//! `ctxkeeper-bench-series`: input tokens of every model call of one trace, for the unmanaged
//! baseline and every preset, as JSON (the data behind the per-step chart of bench/RESULTS.md).
//!
//! ```text
//! ctxkeeper-bench-series TRACE [--window 16000] [--concat] [--policy NAME]...
//! ```
//!
//! `ctxkeeper replay --json` reports totals only; this runs the same replay through the library
//! (same importer, token model, archive and extractive summarizer as the CLI) and keeps the
//! per-step series.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use ctxkeeper_bench::series::{SeriesRequest, run_series};

fn main() {
    if let Err(err) = parse_args().and_then(|request| run_series(&request)) {
        eprintln!("ctxkeeper-bench-series: {err:#}");
        std::process::exit(1);
    }
}

fn parse_args() -> Result<SeriesRequest> {
    let mut args = std::env::args().skip(1);
    let mut trace = None;
    let mut window = 16_000;
    let mut concat = false;
    let mut policies = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--window" => {
                let value = args.next().context("--window needs a value")?;
                window = value
                    .parse()
                    .with_context(|| format!("--window {value:?} is not a number of tokens"))?;
            }
            "--concat" => concat = true,
            "--policy" => policies.push(args.next().context("--policy needs a value")?),
            "-h" | "--help" => {
                println!(
                    "usage: ctxkeeper-bench-series TRACE [--window 16000] [--concat] [--policy NAME]..."
                );
                std::process::exit(0);
            }
            other if other.starts_with('-') => bail!("unknown option {other}"),
            other => trace = Some(PathBuf::from(other)),
        }
    }
    Ok(SeriesRequest {
        trace: trace.context("missing TRACE (a trace file)")?,
        window,
        concat,
        policies,
    })
}
