//! cargo-fuzz harness of the `wire_responses` target (crates/ctxkeeper-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctxkeeper_fuzz::targets::wire::responses(data));
