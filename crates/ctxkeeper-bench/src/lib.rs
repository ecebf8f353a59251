//! Benchmark tooling for ctxkeeper: the per-step token series `ctxkeeper replay --json` does
//! not report ([`series`]), the results every `bench/run` stage writes ([`results`]), and the
//! report built from them: bench/RESULTS.md ([`markdown`]) and its SVG charts ([`charts`]).
//!
//! ```
//! use ctxkeeper_bench::{markdown, results::Results};
//!
//! // With no results at all, every section says which stage produces it.
//! let page = markdown::render(&Results::default(), "charts");
//! assert!(page.contains("bench/run compaction"));
//! ```

pub mod charts;
pub mod markdown;
pub mod results;
pub mod series;
