//! No code: a crate that exists for its `Cargo.toml`.
//!
//! Cargo compiles a dependency once per set of features it is built with, and the set depends
//! on what the command builds: `cargo test` and `cargo bench` add the host's dev-dependencies,
//! whose features then reach shared crates (`syn` above all, which every derive macro uses,
//! and so every crate that derives). Without this crate, the demo's build, `cargo build
//! --release`, the test suite and the benchmark each resolved some dependencies differently
//! and compiled them again. The host depends on this crate, which asks for the union of those
//! features, so every command resolves them alike. This is the pattern `cargo hakari` automates
//! (a "workspace-hack" crate); it is kept by hand here because the list is short, and
//! `cargo xtask test` fails with the packages to add when it grows.
