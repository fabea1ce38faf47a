//! The deployment concern on every backend: builds stored in chunks and read back whole,
//! versions numbered per type, a canary's candidate beside the stable version, changes that
//! apply only on the revision they were made from (so two cannot both win), the history, and
//! pruning that keeps what is served and what a dead letter ran.

use sha2::{Digest, Sha256};

use crate::Fixture;
use spool::store::ClaimRequest;
use spool::store::deployments::{Actor, BuildTally, CHUNK_BYTES, DeploymentChange, NewVersion};
use spool::task::{NewTask, Status};

on_every_backend!(deployments:
    a_build_larger_than_a_chunk_round_trips_and_is_stored_once,
    versions_are_numbered_per_type_and_a_canary_keeps_the_stable_version,
    a_change_applies_only_on_the_revision_it_was_made_from,
    pruning_keeps_what_is_served_and_what_a_dead_letter_ran,
    build_tallies_replace_per_host_and_window_and_are_pruned_by_age,
);

fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn actor() -> Actor {
    Actor {
        right: "deploy".into(),
        origin: Some("127.0.0.1".into()),
    }
}

/// Stores `bytes` and deploys them as a new version of `task_type`.
async fn deploy(
    fixture: &Fixture,
    task_type: &str,
    bytes: &[u8],
    canary: Option<u8>,
) -> spool::store::deployments::Deployment {
    let digest = digest(bytes);
    fixture.store.store_build(&digest, bytes).await.unwrap();
    let actor = actor();
    fixture
        .store
        .deploy(&NewVersion {
            task_type,
            digest: &digest,
            size: bytes.len() as u64,
            manifest: Some("max_retry = 2\n"),
            canary_percent: canary,
            actor: &actor,
            detail: None,
        })
        .await
        .unwrap()
}

pub async fn a_build_larger_than_a_chunk_round_trips_and_is_stored_once(fixture: &Fixture) {
    let bytes: Vec<u8> = (0..CHUNK_BYTES * 2 + 12_345)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let large = digest(&bytes);
    assert_eq!(fixture.store.build(&large).await.unwrap(), None);
    fixture.store.store_build(&large, &bytes).await.unwrap();
    // Stored again (a second deploy of the same build): kept, not duplicated.
    fixture.store.store_build(&large, &bytes).await.unwrap();
    let read = fixture.store.build(&large).await.unwrap().unwrap();
    assert_eq!(read.len(), bytes.len());
    assert!(read == bytes, "the bytes come back as stored");
    // Every byte value survives (no text conversion on the way).
    let all: Vec<u8> = (0..=255u8).collect();
    let every_byte = digest(&all);
    fixture.store.store_build(&every_byte, &all).await.unwrap();
    assert_eq!(
        fixture.store.build(&every_byte).await.unwrap().unwrap(),
        all
    );
}

pub async fn versions_are_numbered_per_type_and_a_canary_keeps_the_stable_version(
    fixture: &Fixture,
) {
    assert!(fixture.store.deployments().await.unwrap().is_empty());
    let first = deploy(fixture, "report", b"build one", None).await;
    assert_eq!(
        (first.last_version, first.stable, first.candidate),
        (1, Some(1), None)
    );
    assert_eq!(first.revision, 1);
    let other = deploy(fixture, "mail", b"build one", None).await;
    assert_eq!(other.stable, Some(1), "numbers are per type");

    let canary = deploy(fixture, "report", b"build two", Some(25)).await;
    assert_eq!(
        (canary.stable, canary.candidate, canary.canary_percent),
        (Some(1), Some(2), 25)
    );
    assert!(canary.canary_since.is_some());
    assert!(canary.revision > first.revision);

    let versions = fixture.store.versions("report").await.unwrap();
    assert_eq!(
        versions.iter().map(|v| v.number).collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(versions[0].digest, digest(b"build two"));
    assert_eq!(versions[0].size, 9);
    assert_eq!(versions[0].manifest.as_deref(), Some("max_retry = 2\n"));
    assert_eq!(versions[0].deployed_by, "deploy");
    assert_eq!(versions[0].origin.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        fixture
            .store
            .version("report", 1)
            .await
            .unwrap()
            .unwrap()
            .digest,
        digest(b"build one")
    );
    assert_eq!(fixture.store.version("report", 9).await.unwrap(), None);

    // A full deploy ends the canary.
    let full = deploy(fixture, "report", b"build three", None).await;
    assert_eq!(
        (
            full.stable,
            full.candidate,
            full.canary_percent,
            full.canary_since
        ),
        (Some(3), None, 0, None)
    );
    let events = fixture.store.deploy_events("report", 10).await.unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.action.as_str(), e.version))
            .collect::<Vec<_>>(),
        [
            ("deploy", Some(3)),
            ("canary", Some(2)),
            ("deploy", Some(1))
        ]
    );
    assert_eq!(events[0].actor, actor());
    let names: Vec<String> = fixture
        .store
        .deployments()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.task_type)
        .collect();
    assert_eq!(names, ["mail", "report"]);
}

pub async fn a_change_applies_only_on_the_revision_it_was_made_from(fixture: &Fixture) {
    deploy(fixture, "report", b"one", None).await;
    let canary = deploy(fixture, "report", b"two", Some(50)).await;
    let leader = Actor {
        right: "leader".into(),
        origin: Some("host-a".into()),
    };
    let promote = DeploymentChange {
        task_type: "report",
        expected_revision: canary.revision,
        stable: canary.candidate,
        candidate: None,
        canary_percent: 0,
        action: "promote",
        version: canary.candidate,
        actor: &leader,
        detail: Some("0 of 20 candidate attempts failed"),
    };
    let rollback = DeploymentChange {
        action: "rollback",
        stable: canary.stable,
        detail: None,
        ..promote.clone()
    };
    // Two decisions from one revision, at once: exactly one applies.
    let (a, b) = tokio::join!(
        fixture.store.change_deployment(&promote),
        fixture.store.change_deployment(&rollback)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.is_some() != b.is_some(), "{a:?} / {b:?}");
    let after = a.or(b).unwrap();
    assert_eq!(after.candidate, None);
    assert_eq!(after.revision, canary.revision + 1);
    assert_eq!(after.canary_since, None);
    // Only the change that applied is in the history.
    let events = fixture.store.deploy_events("report", 10).await.unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(events[0].action.as_str(), "promote" | "rollback"));
    assert_eq!(events[0].actor, leader);
    // A stale revision changes nothing.
    assert_eq!(
        fixture.store.change_deployment(&promote).await.unwrap(),
        None
    );
    assert_eq!(
        fixture.store.deployment("report").await.unwrap().unwrap(),
        after
    );
    // Keeping a candidate keeps its trial's start.
    let again = deploy(fixture, "report", b"three", Some(10)).await;
    let widen = DeploymentChange {
        expected_revision: again.revision,
        stable: again.stable,
        candidate: again.candidate,
        canary_percent: 40,
        action: "canary",
        version: again.candidate,
        ..promote.clone()
    };
    let widened = fixture
        .store
        .change_deployment(&widen)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(widened.canary_percent, 40);
    assert_eq!(widened.canary_since, again.canary_since);
}

pub async fn pruning_keeps_what_is_served_and_what_a_dead_letter_ran(fixture: &Fixture) {
    let builds: Vec<Vec<u8>> = (0..6).map(|i| format!("build {i}").into_bytes()).collect();
    for build in &builds[..5] {
        deploy(fixture, "report", build, None).await;
    }
    // Version 2's build ran a task that is now a dead letter.
    let id = fixture
        .store
        .enqueue(vec![NewTask {
            task_type: "report".into(),
            payload: "{}".into(),
            priority: 0,
            max_retry: 0,
            run_at: chrono::Utc::now(),
            idempotency_key: None,
            depth: 0,
        }])
        .await
        .unwrap()[0]
        .task
        .id;
    let claimed = fixture
        .store
        .claim(&ClaimRequest {
            owner: "host".into(),
            task_types: vec!["report".into()],
            limit: 1,
            now: chrono::Utc::now(),
            lease: std::time::Duration::from_secs(60),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut failed = crate::contract::finished(&claimed[0], "host", Status::Failed);
    failed.plugin_version = Some(digest(&builds[1]));
    fixture.store.complete(&[failed]).await.unwrap();
    assert_eq!(
        fixture.store.get(id).await.unwrap().unwrap().status,
        Status::Failed
    );
    // Version 6 on trial, version 5 stable.
    deploy(fixture, "report", &builds[5], Some(10)).await;

    let forgotten = fixture.store.prune_versions("report", 2).await.unwrap();
    let kept: Vec<u64> = fixture
        .store
        .versions("report")
        .await
        .unwrap()
        .iter()
        .map(|v| v.number)
        .collect();
    // The newest two (6, the candidate, and 5, the stable), and 2 (a dead letter ran it).
    assert_eq!(kept, [6, 5, 2]);
    assert_eq!(forgotten, 3);
    // Builds no version names stay for the grace period (a deploy may be writing its version).
    assert!(
        fixture
            .store
            .build(&digest(&builds[0]))
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(fixture.store.prune_versions("report", 2).await.unwrap(), 0);
    assert_eq!(fixture.store.prune_versions("nothing", 2).await.unwrap(), 0);
}

fn tally(host: &str, window_ms: i64, attempts: u64) -> BuildTally {
    BuildTally {
        task_type: "report".into(),
        digest: "d1".into(),
        host_id: host.into(),
        window_ms,
        attempts,
        failures: attempts / 2,
        wall_ms_total: attempts * 10,
        wall_buckets: r#"{"13":3}"#.into(),
        fuel_total: u64::MAX / 4,
        fuel_attempts: attempts,
        memory_peak: 1 << 33,
    }
}

pub async fn build_tallies_replace_per_host_and_window_and_are_pruned_by_age(fixture: &Fixture) {
    let store = &fixture.store;
    store
        .record_tallies(&[tally("a", 7, 3), tally("b", 7, 5), tally("a", 0, 1)])
        .await
        .unwrap();
    // A host writes its running counts again: the row is replaced, not added to.
    store.record_tallies(&[tally("a", 7, 4)]).await.unwrap();
    store.record_tallies(&[]).await.unwrap();
    let mut window = store.tallies("report", Some(7)).await.unwrap();
    window.sort_by(|x, y| x.host_id.cmp(&y.host_id));
    assert_eq!(window, [tally("a", 7, 4), tally("b", 7, 5)]);
    assert_eq!(store.tallies("report", None).await.unwrap().len(), 3);
    assert!(store.tallies("other", None).await.unwrap().is_empty());
    assert_eq!(
        store
            .prune_tallies(chrono::Utc::now() - chrono::TimeDelta::hours(1))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .prune_tallies(chrono::Utc::now() + chrono::TimeDelta::seconds(1))
            .await
            .unwrap(),
        3
    );
    assert!(store.tallies("report", None).await.unwrap().is_empty());
}
