//! `ctxkeeper-bench-report`: rewrites bench/RESULTS.md and bench/charts/*.svg from the JSON
//! results `bench/run` leaves in bench/results/, keeping the page's hand-written sections
//! (see `markdown::hand_written`).
//!
//! ```text
//! ctxkeeper-bench-report [--results bench/results] [--out bench/RESULTS.md] [--charts bench/charts]
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use ctxkeeper_bench::{charts, markdown, results::Results};

struct Args {
    results: PathBuf,
    out: PathBuf,
    charts: PathBuf,
}

fn main() {
    if let Err(err) = parse_args().and_then(|args| run(&args)) {
        eprintln!("ctxkeeper-bench-report: {err:#}");
        std::process::exit(1);
    }
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        results: "bench/results".into(),
        out: "bench/RESULTS.md".into(),
        charts: "bench/charts".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--results" => args.results = value("--results")?.into(),
            "--out" => args.out = value("--out")?.into(),
            "--charts" => args.charts = value("--charts")?.into(),
            "-h" | "--help" => {
                println!(
                    "usage: ctxkeeper-bench-report [--results DIR] [--out FILE.md] [--charts DIR]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(args)
}

fn run(args: &Args) -> Result<()> {
    if !args.results.is_dir() {
        bail!(
            "{}: no results directory (run bench/run first)",
            args.results.display()
        );
    }
    let results = Results::load(&args.results)?;
    let written = charts::write_all(&results, &args.charts)?;
    let charts_dir = relative_charts(&args.out, &args.charts);
    // Sections no stage measures are written by hand; the page keeps them.
    let kept = match std::fs::read_to_string(&args.out) {
        Ok(existing) => {
            let fresh = markdown::render(&results, &charts_dir);
            markdown::hand_written(&existing, &markdown::generated_headings(&fresh))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => {
            return Err(err).with_context(|| format!("cannot read {}", args.out.display()));
        }
    };
    let page = markdown::render_keeping(&results, &charts_dir, &kept);
    std::fs::write(&args.out, page)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!(
        "ctxkeeper-bench-report: wrote {} and {} chart(s) in {}",
        args.out.display(),
        written.len(),
        args.charts.display()
    );
    Ok(())
}

/// The charts directory as a link from the page (both usually sit in bench/).
fn relative_charts(page: &Path, charts: &Path) -> String {
    let base = page.parent().unwrap_or(Path::new(""));
    charts
        .strip_prefix(base)
        .unwrap_or(charts)
        .display()
        .to_string()
}
