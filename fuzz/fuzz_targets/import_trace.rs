//! cargo-fuzz harness of the `import_trace` target (crates/ctxkeeper-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctxkeeper_fuzz::targets::import::import_trace(data));
