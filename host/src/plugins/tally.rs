//! How a build did: attempts, failures, time, fuel and memory, counted per build and summed
//! over hosts. Hosts count their own attempts (`worker::run::tallies`) and store the counts
//! (`store::deployments::BuildTally`); the canary's verdict ([`super::rollout::verdict`]) and
//! `spool versions` read the sums.
//!
//! Attempt times are kept in logarithmic buckets, four per doubling (each about 19 % wider
//! than the last), so a percentile read from them is within that of the true one, however many
//! attempts were counted, and the counts of many hosts add up bucket by bucket.

use std::collections::BTreeMap;

use crate::store::deployments::BuildTally;

/// Buckets per doubling of the attempt time.
const BUCKETS_PER_DOUBLING: f64 = 4.0;

/// The counts of one build.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub attempts: u64,
    /// Attempts that ended in a retry, a failure, a crash or a timeout.
    pub failures: u64,
    pub wall_ms_total: u64,
    /// Attempt times: bucket index → attempts.
    pub wall_buckets: BTreeMap<u32, u64>,
    pub fuel_total: u64,
    pub fuel_attempts: u64,
    pub memory_peak: u64,
}

/// One attempt, as it is counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counted {
    pub failed: bool,
    pub wall_ms: u64,
    pub fuel: Option<u64>,
    pub memory: u64,
}

fn bucket_of(ms: u64) -> u32 {
    ((ms as f64 + 1.0).log2() * BUCKETS_PER_DOUBLING).floor() as u32
}

/// The largest time in a bucket, in ms.
fn bucket_top(bucket: u32) -> u64 {
    (2f64.powf(f64::from(bucket + 1) / BUCKETS_PER_DOUBLING) - 1.0).round() as u64
}

impl Tally {
    pub fn count(&mut self, attempt: Counted) {
        self.attempts += 1;
        self.failures += u64::from(attempt.failed);
        self.wall_ms_total = self.wall_ms_total.saturating_add(attempt.wall_ms);
        *self
            .wall_buckets
            .entry(bucket_of(attempt.wall_ms))
            .or_default() += 1;
        if let Some(fuel) = attempt.fuel {
            self.fuel_total = self.fuel_total.saturating_add(fuel);
            self.fuel_attempts += 1;
        }
        self.memory_peak = self.memory_peak.max(attempt.memory);
    }

    /// Adds another host's (or window's) counts.
    pub fn add(&mut self, other: &Tally) {
        self.attempts += other.attempts;
        self.failures += other.failures;
        self.wall_ms_total = self.wall_ms_total.saturating_add(other.wall_ms_total);
        for (bucket, n) in &other.wall_buckets {
            *self.wall_buckets.entry(*bucket).or_default() += n;
        }
        self.fuel_total = self.fuel_total.saturating_add(other.fuel_total);
        self.fuel_attempts += other.fuel_attempts;
        self.memory_peak = self.memory_peak.max(other.memory_peak);
    }

    /// The share of attempts that failed, 0 to 1 (0 without attempts).
    pub fn failure_share(&self) -> f64 {
        match self.attempts {
            0 => 0.0,
            n => self.failures as f64 / n as f64,
        }
    }

    /// The attempt time at quantile `q` (0 to 1), in ms: the top of the bucket it falls in.
    pub fn wall_ms_at(&self, q: f64) -> Option<u64> {
        let total: u64 = self.wall_buckets.values().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, n) in &self.wall_buckets {
            seen += n;
            if seen >= rank {
                return Some(bucket_top(*bucket));
            }
        }
        None
    }

    /// The mean fuel of the attempts whose fuel is known.
    pub fn mean_fuel(&self) -> Option<u64> {
        (self.fuel_attempts > 0).then(|| self.fuel_total / self.fuel_attempts)
    }

    /// As stored for `host_id` in `window_ms`.
    pub fn to_row(
        &self,
        task_type: &str,
        digest: &str,
        host_id: &str,
        window_ms: i64,
    ) -> BuildTally {
        BuildTally {
            task_type: task_type.to_string(),
            digest: digest.to_string(),
            host_id: host_id.to_string(),
            window_ms,
            attempts: self.attempts,
            failures: self.failures,
            wall_ms_total: self.wall_ms_total,
            wall_buckets: serde_json::to_string(&self.wall_buckets).unwrap_or_else(|_| "{}".into()),
            fuel_total: self.fuel_total,
            fuel_attempts: self.fuel_attempts,
            memory_peak: self.memory_peak,
        }
    }

    /// Read back from a stored row (unreadable buckets read as none).
    pub fn of_row(row: &BuildTally) -> Tally {
        Tally {
            attempts: row.attempts,
            failures: row.failures,
            wall_ms_total: row.wall_ms_total,
            wall_buckets: serde_json::from_str(&row.wall_buckets).unwrap_or_default(),
            fuel_total: row.fuel_total,
            fuel_attempts: row.fuel_attempts,
            memory_peak: row.memory_peak,
        }
    }
}

/// Stored rows summed per build digest.
pub fn per_build(rows: &[BuildTally]) -> BTreeMap<String, Tally> {
    let mut sums: BTreeMap<String, Tally> = BTreeMap::new();
    for row in rows {
        sums.entry(row.digest.clone())
            .or_default()
            .add(&Tally::of_row(row));
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(wall_ms: u64, failed: bool) -> Counted {
        Counted {
            failed,
            wall_ms,
            fuel: Some(1000),
            memory: wall_ms * 10,
        }
    }

    #[test]
    fn percentiles_come_within_a_bucket_of_the_truth() {
        let mut tally = Tally::default();
        for ms in 1..=1000 {
            tally.count(attempt(ms, ms % 10 == 0));
        }
        let p50 = tally.wall_ms_at(0.5).unwrap();
        let p95 = tally.wall_ms_at(0.95).unwrap();
        assert!((500..=600).contains(&p50), "{p50}");
        assert!((950..=1140).contains(&p95), "{p95}");
        assert!((tally.failure_share() - 0.1).abs() < 1e-9);
        assert_eq!(tally.mean_fuel(), Some(1000));
        assert_eq!(tally.memory_peak, 10_000);
        assert_eq!(Tally::default().wall_ms_at(0.5), None);
        assert_eq!(tally.wall_ms_at(0.0), Some(bucket_top(bucket_of(1))));
    }

    #[test]
    fn hosts_add_up_and_rows_round_trip() {
        let (mut a, mut b) = (Tally::default(), Tally::default());
        for ms in [5, 10, 20] {
            a.count(attempt(ms, false));
        }
        b.count(attempt(10, true));
        b.count(Counted {
            fuel: None,
            ..attempt(4000, true)
        });
        let rows = [
            a.to_row("report", "d1", "host-a", 7),
            b.to_row("report", "d1", "host-b", 7),
            b.to_row("report", "d2", "host-b", 7),
        ];
        assert_eq!(Tally::of_row(&rows[0]), a);
        let sums = per_build(&rows);
        let d1 = &sums["d1"];
        assert_eq!((d1.attempts, d1.failures, d1.fuel_attempts), (5, 2, 4));
        assert_eq!(d1.memory_peak, 40_000);
        assert_eq!(d1.wall_buckets.values().sum::<u64>(), 5);
        assert_eq!(sums["d2"].attempts, 2);
    }
}
