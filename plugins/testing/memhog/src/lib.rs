//! `memhog` (test handler): allocates memory until the host stops it.
//!
//! Used to test the host's memory limit. The handler allocates 1 MiB chunks without end,
//! writing to every page of each chunk and keeping all of them, so the optimizer can remove
//! none. It never returns: when the host refuses to grow the instance's memory, the
//! allocation fails and the instance traps. The payload is ignored.

use core::hint::black_box;

use spool_sdk::{Failure, Handler, TaskInfo};

/// The `memhog` handler.
struct Memhog;

/// The size of one chunk.
const CHUNK: usize = 1 << 20;

/// The size of a WebAssembly page: writing one byte per page touches all of a chunk.
const PAGE: usize = 64 << 10;

impl Handler for Memhog {
    fn handle(_task: TaskInfo, _payload: String) -> Result<String, Failure> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk = vec![0u8; CHUNK];
            for (page, byte) in chunk.iter_mut().step_by(PAGE).enumerate() {
                *byte = page as u8 | 1;
            }
            hoard.push(black_box(chunk));
            black_box(&hoard);
        }
    }
}

spool_sdk::export_handler!(Memhog);
