//! The rules of changing what a deployed type serves: what promoting and rolling back mean,
//! when either is refused, and the canary's verdict ([`verdict`]). Pure decisions over a [`Deployment`]; the caller (the API, the
//! canary's verdict) applies them with [`crate::store::deployments::Deployments::change_deployment`]
//! on the revision it read, so a decision made on a stale view changes nothing.

use chrono::{DateTime, Utc};
use std::time::Duration;

use super::tally::Tally;
use crate::store::deployments::Deployment;

/// When a candidate is judged (the host's `canary_*` settings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CanaryRules {
    /// Candidate attempts before any verdict.
    pub min_attempts: u64,
    /// How far the candidate's share of failed attempts may exceed the stable build's, in
    /// percentage points, before it is rolled back.
    pub max_failure_increase: u64,
    /// How many times the stable build's p50 attempt time the candidate may take (none: no limit).
    pub max_slowdown: Option<f64>,
    /// How many times the stable build's peak memory the candidate may use (none: no limit).
    pub max_memory_increase: Option<f64>,
    /// How long a candidate that passes stays on trial before it is promoted.
    pub duration: Duration,
}

/// Which versions a type should serve after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub stable: Option<u64>,
    pub candidate: Option<u64>,
    pub canary_percent: u8,
    /// `promote`, `rollback` or `remove`, for the history.
    pub action: &'static str,
    /// The version the change is about, for the history.
    pub version: Option<u64>,
}

/// Why a change is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "task type {0} is not deployed: deploy a build first (spool deploy FILE.wasm --type {0})"
    )]
    NotDeployed(String),
    #[error("task type {0} has no candidate on trial: deploy one with --canary PERCENT")]
    NoCandidate(String),
    #[error(
        "task type {task_type} has no version {version} (spool versions {task_type} lists those kept)"
    )]
    NoSuchVersion { task_type: String, version: u64 },
    #[error("version {version} of {task_type} is already the stable version")]
    AlreadyStable { task_type: String, version: u64 },
    #[error(
        "task type {0} has no version before its stable one to roll back to: name one with --to VERSION"
    )]
    NothingBefore(String),
}

/// Promoting: the candidate becomes the stable version and the trial ends.
pub fn promote(deployment: &Deployment) -> Result<Target, Refusal> {
    let candidate = deployment
        .candidate
        .ok_or_else(|| Refusal::NoCandidate(deployment.task_type.clone()))?;
    Ok(Target {
        stable: Some(candidate),
        candidate: None,
        canary_percent: 0,
        action: "promote",
        version: Some(candidate),
    })
}

/// Removing: the type is served from the database no more (its versions are kept).
pub fn remove(deployment: &Deployment) -> Target {
    Target {
        stable: None,
        candidate: None,
        canary_percent: 0,
        action: "remove",
        version: deployment.stable,
    }
}

/// Rolling back, given the version numbers still kept:
/// - to a named version: it becomes the stable version and any trial ends;
/// - with a candidate on trial: the candidate is dropped and the stable version serves all;
/// - otherwise: the newest kept version before the stable one becomes stable.
pub fn roll_back(
    deployment: &Deployment,
    kept: &[u64],
    to: Option<u64>,
) -> Result<Target, Refusal> {
    let task_type = &deployment.task_type;
    if deployment.stable.is_none() {
        return Err(Refusal::NotDeployed(task_type.clone()));
    }
    let stable_at = |version: u64, about: u64| Target {
        stable: Some(version),
        candidate: None,
        canary_percent: 0,
        action: "rollback",
        version: Some(about),
    };
    match (to, deployment.candidate) {
        (Some(version), _) if !kept.contains(&version) => Err(Refusal::NoSuchVersion {
            task_type: task_type.clone(),
            version,
        }),
        (Some(version), None) if deployment.stable == Some(version) => {
            Err(Refusal::AlreadyStable {
                task_type: task_type.clone(),
                version,
            })
        }
        (Some(version), _) => Ok(stable_at(version, version)),
        (None, Some(candidate)) => Ok(Target {
            stable: deployment.stable,
            ..stable_at(0, candidate)
        }),
        (None, None) => {
            let stable = deployment.stable.unwrap_or(0);
            let before = kept.iter().copied().filter(|n| *n < stable).max();
            before
                .map(|version| stable_at(version, version))
                .ok_or_else(|| Refusal::NothingBefore(task_type.clone()))
        }
    }
}

/// The canary's verdict on a candidate, from what the stable and the candidate builds did
/// since the trial began: rolled back once it has `min_attempts` and fails more than
/// `max_failure_increase` points more often than the stable build; promoted once it has
/// `min_attempts` and `duration` has passed; else none yet (a quiet type's candidate waits for
/// attempts, or for a promotion by hand). The detail states the figures.
pub fn verdict(
    deployment: &Deployment,
    stable: &Tally,
    candidate: &Tally,
    rules: &CanaryRules,
    now: DateTime<Utc>,
) -> Option<(Target, String)> {
    let number = deployment.candidate?;
    let since = deployment.canary_since?;
    if candidate.attempts < rules.min_attempts {
        return None;
    }
    let increase = (candidate.failure_share() - stable.failure_share()) * 100.0;
    let figures = comparison(number, stable, candidate);
    let slowdown = ratio(candidate.wall_ms_at(0.5), stable.wall_ms_at(0.5));
    let memory = ratio(Some(candidate.memory_peak), Some(stable.memory_peak));
    let broken = if increase > rules.max_failure_increase as f64 {
        Some(format!(
            "failures {increase:+.1} points over the stable build's, past the limit of {} (canary_max_failure_increase)",
            rules.max_failure_increase
        ))
    } else if let (Some(limit), Some(r)) = (rules.max_slowdown, slowdown)
        && r > limit
    {
        Some(format!(
            "p50 time {r:.1}× the stable build's, past the limit of {limit} (canary_max_slowdown)"
        ))
    } else if let (Some(limit), Some(r)) = (rules.max_memory_increase, memory)
        && r > limit
    {
        Some(format!(
            "peak memory {r:.1}× the stable build's, past the limit of {limit} (canary_max_memory_increase)"
        ))
    } else {
        None
    };
    if let Some(why) = broken {
        let detail = format!("{figures}; {why}");
        return Some((roll_back(deployment, &[], None).ok()?, detail));
    }
    let elapsed = (now - since).to_std().unwrap_or_default();
    if elapsed >= rules.duration {
        let detail = format!(
            "{figures}; failures {increase:+.1} points over the stable build's, within the limit of {}, for {:?} (canary_duration)",
            rules.max_failure_increase, rules.duration
        );
        return Some((promote(deployment).ok()?, detail));
    }
    None
}

/// `a` as a multiple of `b`, when both are known and `b` is not zero.
fn ratio(a: Option<u64>, b: Option<u64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
        _ => None,
    }
}

/// The candidate's figures beside the stable build's, in words.
fn comparison(number: u64, stable: &Tally, candidate: &Tally) -> String {
    let share = |t: &Tally| {
        format!(
            "{} of {} attempts failed ({:.1} %)",
            t.failures,
            t.attempts,
            t.failure_share() * 100.0
        )
    };
    let mut text = format!(
        "candidate version {number}: {}; stable: {}",
        share(candidate),
        share(stable)
    );
    let mut costs = Vec::new();
    if let Some(r) = ratio(candidate.wall_ms_at(0.5), stable.wall_ms_at(0.5)) {
        costs.push(format!("p50 time {r:.1}×"));
    }
    if let Some(r) = ratio(candidate.mean_fuel(), stable.mean_fuel()) {
        costs.push(format!("fuel {r:.1}×"));
    }
    if let Some(r) = ratio(Some(candidate.memory_peak), Some(stable.memory_peak)) {
        costs.push(format!("peak memory {r:.1}×"));
    }
    if !costs.is_empty() {
        text.push_str(&format!(
            "; candidate's cost against the stable's: {}",
            costs.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::tally::Counted;
    use super::*;

    fn tally(attempts: u64, failures: u64, wall_ms: u64) -> Tally {
        let mut tally = Tally::default();
        for i in 0..attempts {
            tally.count(Counted {
                failed: i < failures,
                wall_ms,
                fuel: Some(100),
                memory: 1 << 20,
            });
        }
        tally
    }

    #[test]
    fn a_candidate_that_fails_more_is_rolled_back_and_a_sound_one_promoted_in_time() {
        let rules = CanaryRules {
            min_attempts: 20,
            max_failure_increase: 10,
            max_slowdown: None,
            max_memory_increase: None,
            duration: Duration::from_secs(600),
        };
        let mut trial = deployment(Some(3), Some(5));
        let start = chrono::DateTime::UNIX_EPOCH;
        trial.canary_since = Some(start);
        let soon = start + chrono::TimeDelta::seconds(60);
        let later = start + chrono::TimeDelta::seconds(601);
        let stable = tally(100, 2, 10);
        // Too few attempts: no verdict, however bad.
        assert_eq!(
            verdict(&trial, &stable, &tally(19, 19, 10), &rules, later),
            None
        );
        // 30 % against 2 %: back.
        let (target, detail) = verdict(&trial, &stable, &tally(20, 6, 25), &rules, soon).unwrap();
        assert_eq!(
            (target.action, target.stable, target.candidate),
            ("rollback", Some(3), None)
        );
        assert!(detail.starts_with("candidate version 5: 6 of 20 attempts failed (30.0 %); stable: 2 of 100 attempts failed (2.0 %)"), "{detail}");
        assert!(detail.contains("p50 time 2."), "{detail}");
        assert!(detail.contains("+28.0 points"), "{detail}");
        // 10 % against 2 %: within the limit; promoted once the duration passed.
        assert_eq!(
            verdict(&trial, &stable, &tally(20, 2, 10), &rules, soon),
            None
        );
        let (target, detail) = verdict(&trial, &stable, &tally(20, 2, 10), &rules, later).unwrap();
        assert_eq!((target.action, target.stable), ("promote", Some(5)));
        assert!(detail.contains("within the limit of 10"), "{detail}");
        // A slower candidate passes without a slowdown rule, and is rolled back with one.
        let slow = tally(20, 0, 100);
        assert_eq!(verdict(&trial, &stable, &slow, &rules, soon), None);
        let strict = CanaryRules {
            max_slowdown: Some(2.0),
            ..rules
        };
        let (target, detail) = verdict(&trial, &stable, &slow, &strict, soon).unwrap();
        assert_eq!(target.action, "rollback");
        assert!(detail.contains("(canary_max_slowdown)"), "{detail}");
        let mut hungry = tally(20, 0, 10);
        hungry.memory_peak = 8 << 20;
        let (_, detail) = verdict(
            &trial,
            &stable,
            &hungry,
            &CanaryRules {
                max_memory_increase: Some(4.0),
                ..rules
            },
            soon,
        )
        .unwrap();
        assert!(detail.contains("peak memory 8.0×"), "{detail}");
        // No trial, no verdict.
        assert_eq!(
            verdict(&deployment(Some(3), None), &stable, &stable, &rules, later),
            None
        );
    }

    fn deployment(stable: Option<u64>, candidate: Option<u64>) -> Deployment {
        Deployment {
            task_type: "report".into(),
            last_version: 5,
            stable,
            candidate,
            canary_percent: candidate.map_or(0, |_| 25),
            canary_since: None,
            revision: 7,
            updated_at: chrono::DateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn promoting_makes_the_candidate_stable() {
        let target = promote(&deployment(Some(3), Some(5))).unwrap();
        assert_eq!(
            (target.stable, target.candidate, target.canary_percent),
            (Some(5), None, 0)
        );
        assert_eq!(
            promote(&deployment(Some(3), None)),
            Err(Refusal::NoCandidate("report".into()))
        );
    }

    #[test]
    fn rolling_back_drops_the_candidate_or_steps_back_or_goes_where_told() {
        let kept = [5, 4, 3, 1];
        // A trial: the candidate goes, the stable version stays.
        let target = roll_back(&deployment(Some(3), Some(5)), &kept, None).unwrap();
        assert_eq!(
            (target.stable, target.candidate, target.version),
            (Some(3), None, Some(5))
        );
        // No trial: one kept version back (2 was pruned).
        let target = roll_back(&deployment(Some(3), None), &kept, None).unwrap();
        assert_eq!(target.stable, Some(1));
        // Told where: there, and any trial ends.
        let target = roll_back(&deployment(Some(3), Some(5)), &kept, Some(4)).unwrap();
        assert_eq!((target.stable, target.candidate), (Some(4), None));
        // Told the stable version while a trial runs: the trial ends.
        let target = roll_back(&deployment(Some(3), Some(5)), &kept, Some(3)).unwrap();
        assert_eq!((target.stable, target.candidate), (Some(3), None));

        assert!(matches!(
            roll_back(&deployment(Some(3), None), &kept, Some(2)),
            Err(Refusal::NoSuchVersion { version: 2, .. })
        ));
        assert!(matches!(
            roll_back(&deployment(Some(3), None), &kept, Some(3)),
            Err(Refusal::AlreadyStable { version: 3, .. })
        ));
        assert_eq!(
            roll_back(&deployment(Some(1), None), &kept, None),
            Err(Refusal::NothingBefore("report".into()))
        );
        assert_eq!(
            roll_back(&deployment(None, None), &kept, None),
            Err(Refusal::NotDeployed("report".into()))
        );
    }
}
