//! Rebuilds the host when a migration file is added or changed: the migrations are embedded
//! with `sqlx::migrate!`, which only tracks the files that existed at the last build.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
