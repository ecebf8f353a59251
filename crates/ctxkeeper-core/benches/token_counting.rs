//! Token counting throughput on the text of the shared traces: bpe-openai (what
//! `tokens::exact` ships) against tiktoken-rs, in o200k_base and cl100k_base, plus the
//! estimate; and the first-load time of each tokenizer, measured once per process before the
//! benchmarks run.
//!
//! `cargo bench -p ctxkeeper-core --bench token_counting -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use ctxkeeper_core::tokens::estimate::estimate;
use ctxkeeper_core::tokens::exact::Encoding;
use serde_json::Value;

#[path = "../tests/support/traces.rs"]
mod traces;

use traces::{default_traces_dir, trace_files};

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, out)),
        Value::Object(map) => map.values().for_each(|item| collect_strings(item, out)),
        _ => {}
    }
}

/// Every string value of every trace file (JSON Lines line by line), in file-name order.
fn trace_strings() -> Vec<String> {
    let files = trace_files(&default_traces_dir());
    let mut strings = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if path.extension().and_then(|e| e.to_str()) == Some("jsonl") {
            for line in text.lines() {
                if let Ok(value) = serde_json::from_str::<Value>(line) {
                    collect_strings(&value, &mut strings);
                }
            }
        } else if let Ok(value) = serde_json::from_str::<Value>(&text) {
            collect_strings(&value, &mut strings);
        }
    }
    strings
}

fn time_first_use(label: &str, first_use: impl FnOnce() -> usize) {
    let started = Instant::now();
    let tokens = black_box(first_use());
    println!(
        "first load  {label:<24} {:>8.1} ms  ({tokens} tokens)",
        ms(started.elapsed())
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn main() {
    // First loads, before anything else touches the tokenizers.
    time_first_use("o200k  bpe-openai", || {
        Encoding::O200kBase.count("hello world") as usize
    });
    time_first_use("cl100k bpe-openai", || {
        Encoding::Cl100kBase.count("hello world") as usize
    });
    time_first_use("o200k  tiktoken-rs", || {
        tiktoken_rs::o200k_base_singleton()
            .encode_ordinary("hello world")
            .len()
    });
    time_first_use("cl100k tiktoken-rs", || {
        tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary("hello world")
            .len()
    });

    let mut strings = trace_strings();
    if strings.is_empty() {
        println!(
            "\n!!!!!!!! SKIP: no traces under {}; benchmarking synthetic text instead !!!!!!!!\n",
            default_traces_dir().display()
        );
        strings = vec![
            "The quick brown fox jumps over the lazy dog. 1234567 fn main() {}\n".repeat(10_000),
        ];
    }
    let bytes: usize = strings.iter().map(String::len).sum();
    println!(
        "corpus      {} strings, {:.2} MB",
        strings.len(),
        bytes as f64 / 1e6
    );

    let mut criterion = Criterion::default().sample_size(10).configure_from_args();
    let mut group = criterion.benchmark_group("count");
    group.throughput(Throughput::BytesDecimal(bytes as u64));
    for encoding in Encoding::ALL {
        let reference = match encoding {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        };
        group.bench_function(format!("{}/bpe-openai", encoding.name()), |b| {
            b.iter(|| {
                strings
                    .iter()
                    .map(|s| u64::from(encoding.count(s)))
                    .sum::<u64>()
            })
        });
        group.bench_function(format!("{}/tiktoken-rs", encoding.name()), |b| {
            b.iter(|| {
                strings
                    .iter()
                    .map(|s| reference.encode_ordinary(s).len() as u64)
                    .sum::<u64>()
            })
        });
    }
    group.bench_function("estimate", |b| {
        b.iter(|| {
            strings
                .iter()
                .map(|s| u64::from(estimate(s, 1.0)))
                .sum::<u64>()
        })
    });
    group.finish();

    // "Does this fit in 256 tokens?" on the large strings: full count against early exit.
    let large: Vec<&String> = strings.iter().filter(|s| s.len() >= 8 * 1024).collect();
    let large_bytes: usize = large.iter().map(|s| s.len()).sum();
    let mut group = criterion.benchmark_group("fits_256");
    group.throughput(Throughput::BytesDecimal(large_bytes as u64));
    group.bench_function("o200k_base/count", |b| {
        b.iter(|| {
            large
                .iter()
                .filter(|s| Encoding::O200kBase.count(s) <= 256)
                .count()
        })
    });
    group.bench_function("o200k_base/count_up_to", |b| {
        b.iter(|| {
            large
                .iter()
                .filter(|s| Encoding::O200kBase.count_up_to(s, 256).is_some())
                .count()
        })
    });
    group.finish();

    criterion.final_summary();
}
