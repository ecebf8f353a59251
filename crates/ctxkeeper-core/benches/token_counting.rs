//! Token counting throughput (being written).
fn main() {}
