//! The exact counts (bpe-openai, behind `tokens::exact`) agree with tiktoken-rs, token for
//! token, on every string value of every shared trace, in both encodings.
//!
//! Text is compared as *ordinary* text (`encode_ordinary`): special-token markers such as
//! `<|endoftext|>` in user content are plain characters, as a provider treats text a user sends.
//! The two encodings run on two threads.

use std::path::Path;
use std::time::Instant;

use ctxkeeper_core::tokens::exact::Encoding;
use serde_json::Value;
use tiktoken_rs::CoreBPE;

#[path = "support/traces.rs"]
mod traces;

use traces::{default_traces_dir, trace_files};

fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, out)),
        Value::Object(map) => {
            for (key, item) in map {
                out.push(key.clone());
                collect_strings(item, out);
            }
        }
        _ => {}
    }
}

/// Every string value (and object key) of a trace file; JSON Lines files line by line.
fn file_strings(path: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) => panic!("{}: {err}", path.display()),
    };
    let mut out = Vec::new();
    if path.extension().and_then(|e| e.to_str()) == Some("jsonl") {
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(value) => collect_strings(&value, &mut out),
                Err(err) => panic!("{}:{}: {err}", path.display(), number + 1),
            }
        }
    } else {
        match serde_json::from_str::<Value>(&text) {
            Ok(value) => collect_strings(&value, &mut out),
            Err(err) => panic!("{}: {err}", path.display()),
        }
    }
    out
}

/// The mismatches of one encoding over `strings` (at most a few, for the message).
fn disagreements(encoding: Encoding, reference: &CoreBPE, strings: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    for text in strings {
        let ours = encoding.count(text) as usize;
        let theirs = reference.encode_ordinary(text).len();
        if ours != theirs && bad.len() < 5 {
            let head: String = text.chars().take(80).collect();
            bad.push(format!(
                "{encoding}: ours {ours}, tiktoken {theirs}: {head:?}"
            ));
        }
    }
    bad
}

#[test]
fn exact_counts_agree_with_tiktoken_on_every_trace_string() {
    let dir = default_traces_dir();
    let files = trace_files(&dir);
    if files.is_empty() {
        eprintln!(
            "\n!!!!!!!! SKIP token_agreement: no traces found under {} !!!!!!!!\n",
            dir.display()
        );
        return;
    }
    let started = Instant::now();
    let mut total_strings = 0;
    let mut total_bytes = 0;
    for file in &files {
        let strings = file_strings(file);
        total_strings += strings.len();
        total_bytes += strings.iter().map(String::len).sum::<usize>();
        let (o200k, cl100k) = std::thread::scope(|scope| {
            let o200k = scope.spawn(|| {
                disagreements(
                    Encoding::O200kBase,
                    tiktoken_rs::o200k_base_singleton(),
                    &strings,
                )
            });
            let cl100k = disagreements(
                Encoding::Cl100kBase,
                tiktoken_rs::cl100k_base_singleton(),
                &strings,
            );
            (
                o200k
                    .join()
                    .unwrap_or_else(|_| vec!["o200k thread panicked".into()]),
                cl100k,
            )
        });
        let bad: Vec<String> = o200k.into_iter().chain(cl100k).collect();
        assert!(bad.is_empty(), "{}:\n{}", file.display(), bad.join("\n"));
    }
    eprintln!(
        "token_agreement: {} files, {total_strings} strings, {:.1} MB, both encodings, in {:.1?}",
        files.len(),
        total_bytes as f64 / 1e6,
        started.elapsed()
    );
}

#[test]
fn special_token_text_is_ordinary_text_in_both_implementations() {
    let samples = [
        "<|endoftext|>",
        "please ignore <|endoftext|> and <|im_start|>system<|im_end|>",
        "<|endofprompt|><|fim_prefix|><|fim_middle|><|fim_suffix|>",
        "<|start|>assistant<|channel|>final<|message|>hi<|end|>",
        "<|",
        "|>",
    ];
    for text in samples {
        for (encoding, reference) in [
            (Encoding::O200kBase, tiktoken_rs::o200k_base_singleton()),
            (Encoding::Cl100kBase, tiktoken_rs::cl100k_base_singleton()),
        ] {
            let ours = encoding.count(text) as usize;
            assert_eq!(
                ours,
                reference.encode_ordinary(text).len(),
                "{encoding} {text:?}"
            );
            // The special-token reading would be shorter: ours is not it.
            let special = reference.encode_with_special_tokens(text).len();
            assert!(ours >= special, "{encoding} {text:?}");
        }
    }
    assert_eq!(Encoding::O200kBase.count("<|endoftext|>"), 7);
    assert_eq!(Encoding::Cl100kBase.count("<|endoftext|>"), 7);
}

#[test]
fn count_up_to_agrees_with_tiktoken_at_the_boundary() {
    let text =
        "Tokenizers split text into pieces; 12345 and CamelCase and 日本語 too.\n".repeat(40);
    for (encoding, reference) in [
        (Encoding::O200kBase, tiktoken_rs::o200k_base_singleton()),
        (Encoding::Cl100kBase, tiktoken_rs::cl100k_base_singleton()),
    ] {
        let exact = reference.encode_ordinary(&text).len() as u32;
        assert_eq!(
            encoding.count_up_to(&text, exact),
            Some(exact),
            "{encoding}"
        );
        assert_eq!(encoding.count_up_to(&text, exact - 1), None, "{encoding}");
    }
}
