//! The rules of changing what a deployed type serves: what promoting and rolling back mean,
//! and when either is refused. Pure decisions over a [`Deployment`]; the caller (the API, the
//! canary's verdict) applies them with [`crate::store::deployments::Deployments::change_deployment`]
//! on the revision it read, so a decision made on a stale view changes nothing.

use crate::store::deployments::Deployment;

/// Which versions a type should serve after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub stable: Option<u64>,
    pub candidate: Option<u64>,
    pub canary_percent: u8,
    /// `promote` or `rollback`, for the history.
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

#[cfg(test)]
mod tests {
    use super::*;

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
