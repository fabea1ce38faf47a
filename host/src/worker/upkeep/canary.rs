//! The canary's judge: on the leading host, every few seconds, each deployed type with a
//! candidate on trial is judged on what every host counted of its attempts since the trial
//! began ([`crate::plugins::tally`], [`crate::plugins::rollout::verdict`]): rolled back on
//! every host at once when it fails more often than the stable build by more than the limit,
//! promoted when it passed for the whole trial. The decision is written with the figures in
//! the deployment history, under the revision it was made on, so a verdict is applied once
//! even if two hosts briefly both lead; and everything it reads is in the database, so a new
//! leader finishes the trial its predecessor was judging. A rollback is also sent to the
//! alert channels (the receiver of [`CanaryJudge::verdicts`]).

use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use super::leader::Leadership;
use crate::plugins::rollout::{self, CanaryRules};
use crate::plugins::tally::{Tally, per_build};
use crate::shutdown::{Shutdown, Stage};
use crate::store::deployments::{Actor, Deployment, DeploymentChange};
use crate::store::{SharedStore, StoreError};

/// How often trials are judged.
pub const JUDGE_INTERVAL: Duration = Duration::from_secs(2);
/// How long build counts are kept after their last write.
pub const TALLIES_KEPT: chrono::TimeDelta = chrono::TimeDelta::days(30);

/// A verdict the judge applied.
#[derive(Debug, Clone)]
pub struct CanaryVerdict {
    pub task_type: String,
    /// `promote` or `rollback`.
    pub action: &'static str,
    /// The candidate judged.
    pub version: u64,
    /// The figures it was judged on.
    pub detail: String,
    pub at: DateTime<Utc>,
}

/// The judge service.
pub struct CanaryJudge {
    pub store: SharedStore,
    pub rules: CanaryRules,
    pub host_id: String,
    pub leadership: Arc<Leadership>,
    pub shutdown: Shutdown,
    /// Every verdict applied, for the alert channels.
    pub verdicts: mpsc::UnboundedSender<CanaryVerdict>,
}

impl CanaryJudge {
    /// Judges every [`JUDGE_INTERVAL`] while this host leads, until shutdown begins.
    pub async fn run(self) {
        let mut pruned: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(JUDGE_INTERVAL) => {}
                _ = self.shutdown.reached(Stage::Graceful) => return,
            }
            if !self.leadership.is_leader() {
                continue;
            }
            if let Err(error) = self.judge_all(Utc::now()).await {
                tracing::warn!("judging the canaries failed: {error}; will try again");
            }
            if pruned.is_none_or(|at| at.elapsed() > Duration::from_secs(3600)) {
                pruned = Some(Instant::now());
                if let Err(error) = self.store.prune_tallies(Utc::now() - TALLIES_KEPT).await {
                    tracing::warn!("pruning old build counts failed: {error}");
                }
            }
        }
    }

    /// Judges every trial once; returns the verdicts applied.
    pub async fn judge_all(&self, now: DateTime<Utc>) -> Result<Vec<CanaryVerdict>, StoreError> {
        let mut applied = Vec::new();
        for deployment in self.store.deployments().await? {
            if deployment.candidate.is_some()
                && let Some(verdict) = self.judge(&deployment, now).await?
            {
                let _ = self.verdicts.send(verdict.clone());
                applied.push(verdict);
            }
        }
        Ok(applied)
    }

    async fn judge(
        &self,
        deployment: &Deployment,
        now: DateTime<Utc>,
    ) -> Result<Option<CanaryVerdict>, StoreError> {
        let (Some(stable), Some(candidate), Some(since)) = (
            deployment.stable,
            deployment.candidate,
            deployment.canary_since,
        ) else {
            return Ok(None);
        };
        let task_type = &deployment.task_type;
        let digest = |number| async move {
            self.store
                .version(task_type, number)
                .await
                .map(|v| v.map(|v| v.digest))
        };
        let (Some(stable_digest), Some(candidate_digest)) =
            (digest(stable).await?, digest(candidate).await?)
        else {
            return Ok(None);
        };
        let counted = per_build(
            &self
                .store
                .tallies(task_type, Some(since.timestamp_millis()))
                .await?,
        );
        let of = |digest: &str| counted.get(digest).cloned().unwrap_or_else(Tally::default);
        let Some((target, detail)) = rollout::verdict(
            deployment,
            &of(&stable_digest),
            &of(&candidate_digest),
            &self.rules,
            now,
        ) else {
            return Ok(None);
        };
        let actor = Actor {
            right: "leader".into(),
            origin: Some(self.host_id.clone()),
        };
        let changed = self
            .store
            .change_deployment(&DeploymentChange {
                task_type,
                expected_revision: deployment.revision,
                stable: target.stable,
                candidate: target.candidate,
                canary_percent: target.canary_percent,
                action: target.action,
                version: Some(candidate),
                actor: &actor,
                detail: Some(&detail),
            })
            .await?;
        if changed.is_none() {
            // Changed meanwhile (by hand, or by another host's verdict): judged again next time.
            return Ok(None);
        }
        tracing::warn!(task_type = %task_type, action = target.action, version = candidate, "canary verdict: {detail}");
        Ok(Some(CanaryVerdict {
            task_type: task_type.clone(),
            action: target.action,
            version: candidate,
            detail,
            at: now,
        }))
    }
}
