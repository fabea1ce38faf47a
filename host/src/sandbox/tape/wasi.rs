//! The tape as wasmtime-wasi's clocks and random sources: each read is recorded, or answered
//! from the record in a replay.

use rand::SeedableRng;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RandomSource, Tape};

/// `wasi:clocks/wall-clock` through the tape.
pub struct TapedWallClock(pub Arc<Tape>);

impl wasmtime_wasi::HostWallClock for TapedWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0.wall_clock()
    }
}

/// `wasi:clocks/monotonic-clock` through the tape: nanoseconds since the attempt started.
pub struct TapedMonotonicClock {
    pub tape: Arc<Tape>,
    pub start: Instant,
}

impl wasmtime_wasi::HostMonotonicClock for TapedMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.tape.monotonic_clock(self.start)
    }
}

/// A `wasi:random` source through the tape.
pub struct TapedRandom {
    tape: Arc<Tape>,
    source: RandomSource,
    real: rand::rngs::StdRng,
}

impl TapedRandom {
    pub fn new(tape: Arc<Tape>, source: RandomSource) -> Self {
        TapedRandom {
            tape,
            source,
            real: rand::rngs::StdRng::from_os_rng(),
        }
    }
}

impl rand_core::TryRng for TapedRandom {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut bytes = [0; 4];
        self.try_fill_bytes(&mut bytes)?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut bytes = [0; 8];
        self.try_fill_bytes(&mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.tape.random(self.source, &mut self.real, dst);
        Ok(())
    }
}
