//! cargo-fuzz harness of the `extractive_summary` target (crates/ctxkeeper-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(
    |data: &[u8]| ctxkeeper_fuzz::targets::summary::extractive_summary(data)
);
