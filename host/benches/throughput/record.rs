//! What keeping attempt records costs the drain (`--only record`): the no-op drain with the
//! type's manifest at `record = "none"` (no tape), `"failed"` (the default: every attempt runs
//! on a tape, only failed attempts would keep it, and none fail here) and `"all"` (every
//! attempt's record written to the database). The three run in turn, five rounds, each on a
//! fresh database; the medians are printed as ratios to `"none"` from the same run.

use super::database::Server;
use super::{drain, load};

const MODES: [&str; 3] = ["none", "failed", "all"];
const ROUNDS: usize = 5;

pub async fn report(server: &Server, n: usize, concurrency: Option<usize>) {
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for round in 1..=ROUNDS {
        for (mode, rates) in MODES.iter().zip(&mut rates) {
            let manifest = format!("record = \"{mode}\"\n");
            let drained = drain(server, n, 1, concurrency, true, Some(&manifest)).await;
            println!(
                "round {round}, record = {mode:<8} drain {:>9.0} tasks/s  [load {}]",
                drained.rate,
                load()
            );
            rates.push(drained.rate);
        }
    }
    let medians: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    for (mode, median) in MODES.iter().zip(&medians) {
        println!(
            "drain with record = {mode:<8} median {median:>9.0} tasks/s  ({:.3}× record = \"none\")",
            median / medians[0]
        );
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
