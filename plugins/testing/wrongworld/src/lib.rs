//! `wrongworld` (test component): a valid component that is *not* a Spool handler.
//!
//! It implements its own world, `test:other/other`, exporting `run: func() -> u32` instead of
//! `handle`. The host must refuse to load it as a plugin, with an error that says the
//! component does not implement the `spool:task/handler` world.

/// Bindings for the `other` world.
mod bindings {
    wit_bindgen::generate!({
        inline: r#"
            package test:other;

            world other {
                /// Returns 42.
                export run: func() -> u32;
            }
        "#,
    });
}

/// The export of the `other` world.
struct Other;

impl bindings::Guest for Other {
    fn run() -> u32 {
        42
    }
}

bindings::export!(Other with_types_in bindings);
