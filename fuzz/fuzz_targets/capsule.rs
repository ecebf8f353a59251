//! cargo-fuzz harness of the `capsule` target (crates/ctxkeeper-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctxkeeper_fuzz::targets::capsule::capsule(data));
