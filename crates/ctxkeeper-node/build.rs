//! Link arguments an N-API addon needs on the platforms that ask for them (macOS's dynamic
//! lookup of Node's symbols).
fn main() {
    napi_build::setup();
}
