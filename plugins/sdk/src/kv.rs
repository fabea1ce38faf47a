//! The task type's key-value store.
//!
//! Every task type has its own store of string keys and string values, kept durably in the
//! task database: all tasks of the type share it, and other types cannot see it. Use it for
//! caches and counters. Each call is one operation on its own; a read followed by a write is
//! not atomic, so tasks running at the same time may overwrite each other's updates.

use crate::host;

/// The value stored under `key`, if any.
pub fn get(key: impl AsRef<str>) -> Option<String> {
    host::kv_get(key.as_ref())
}

/// Stores `value` under `key`, replacing any previous value.
pub fn set(key: impl AsRef<str>, value: impl AsRef<str>) {
    host::kv_set(key.as_ref(), value.as_ref());
}

/// Removes `key`; true when it existed.
pub fn delete(key: impl AsRef<str>) -> bool {
    host::kv_delete(key.as_ref())
}
