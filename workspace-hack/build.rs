// Present so that Cargo resolves this crate's [build-dependencies] (see src/lib.rs).
fn main() {}
