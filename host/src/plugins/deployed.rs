//! Keeps the types this host serves from the shared database in step with their deployments
//! (`store::deployments`): every host on one database runs what was deployed once, through any
//! of them.
//!
//! A pass reads every deployment's revision (one small query) and loads only the types whose
//! revision differs from the one this host loaded: the stable version's and the candidate's
//! build bytes from the database (checked against their digest), their manifests, compiled
//! through the same loader and artifact cache as the folder's files. A version already loaded
//! is reused, since a version never changes once deployed. A type whose new revision cannot be
//! loaded here (a grant its manifest names does not exist on this host, say) keeps serving
//! what it served, with the error shown in `GET /plugins`, and is not tried again until its
//! revision changes. A type whose deployment was removed stops being served from the
//! database; the folder's file for it, if there is one, serves again.
//!
//! Passes run at start, before the host serves, then on every wake-up from the database
//! (PostgreSQL notifies `spool_deploy` on every change) and at the poll interval.
//!
//! A fleet compiles each deployed build once ([`build_shared`]): the host that compiles it
//! (the one that took the deploy, which checks the build by compiling it) stores the compiled
//! artifact in the database (`spool_artifact`), tagged with the key every host of the database
//! shares; the others install it in their cache after checking that tag, and load it.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

use super::loader::Named;
use super::registry::{Candidate, Deployed, Source};
use super::{Plugin, PluginLoader, Registry};
use crate::shutdown::{Shutdown, Stage};
use crate::store::deployments::Deployment;
use crate::store::{SharedStore, StoreError};

/// The name a deployed version goes by in logs, errors and `GET /plugins`.
pub fn version_path(task_type: &str, number: u64) -> PathBuf {
    PathBuf::from(format!("deployment:{task_type}@{number}"))
}

/// Checks and compiles a deployed build ([`PluginLoader::build`]) through the compiled code
/// the hosts of the database share: an artifact another host stored is installed in this
/// host's cache first (if its tag verifies), and an artifact compiled here is stored for the
/// others. Sharing is best effort: when the database or the cache cannot help, the build is
/// compiled here as it would be without them.
pub async fn build_shared(
    loader: &PluginLoader,
    store: &SharedStore,
    named: Named,
    bytes: Vec<u8>,
    manifest: Option<&str>,
) -> Result<Plugin, super::LoadError> {
    let digest = hex::encode(Sha256::digest(&bytes));
    let shared = loader
        .cache
        .as_ref()
        .map(|cache| (cache, cache.shared_name(&digest, &bytes)));
    // Whether this host already had it, or found it in the database.
    let mut had_it = false;
    if let Some((cache, name)) = &shared {
        had_it = cache.has(name);
        if !had_it {
            match store.artifact(name).await {
                Ok(Some(contents)) => match cache.import(name, &contents) {
                    Ok(()) => {
                        had_it = true;
                        tracing::info!(task_type = %named.task_type, artifact = %name, "installed the compiled code another host stored");
                    }
                    Err(error) => {
                        tracing::warn!(artifact = %name, "not using the stored compiled code: {error}; compiling")
                    }
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(artifact = %name, "cannot read stored compiled code ({error}); compiling")
                }
            }
        }
    }
    let plugin = loader.build(named, bytes, manifest, None).await?;
    if let Some((cache, name)) = &shared
        && !had_it
        && let Some(contents) = cache.exported(name)
        && let Err(error) = store.store_artifact(name, &digest, &contents).await
    {
        tracing::warn!(artifact = %name, "cannot store the compiled code for the other hosts: {error}");
    }
    Ok(plugin)
}

/// Loads deployments into the registry.
pub struct DeploymentSync {
    pub store: SharedStore,
    pub loader: Arc<PluginLoader>,
    pub registry: Arc<Registry>,
    /// The revision of each type whose load failed, so it is not retried every pass.
    failed: Mutex<HashMap<String, u64>>,
}

impl DeploymentSync {
    pub fn new(store: SharedStore, loader: Arc<PluginLoader>, registry: Arc<Registry>) -> Self {
        DeploymentSync {
            store,
            loader,
            registry,
            failed: Mutex::default(),
        }
    }

    /// One pass: loads every deployment whose revision this host has not loaded, and stops
    /// serving those removed. Load failures are recorded in the registry, not returned.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let deployments = self.store.deployments().await?;
        let loaded = self.registry.deployed_revisions();
        // Each listed type, and whether it has a version to serve.
        let mut listed = BTreeMap::new();
        for deployment in deployments {
            listed.insert(deployment.task_type.clone(), deployment.stable.is_some());
            if deployment.stable.is_none() {
                continue;
            }
            let known = loaded.get(&deployment.task_type) == Some(&deployment.revision)
                || self.failed_at(&deployment.task_type) == Some(deployment.revision);
            if !known {
                self.load(&deployment).await;
            }
        }
        for task_type in loaded.keys() {
            if listed.get(task_type) != Some(&true) {
                tracing::info!(task_type = %task_type, "deployment removed; no longer served from the database");
                self.registry.remove_deployed(task_type);
            }
        }
        Ok(())
    }

    fn failed_at(&self, task_type: &str) -> Option<u64> {
        self.failed
            .lock()
            .expect("deployment sync lock")
            .get(task_type)
            .copied()
    }

    /// Loads one deployment's builds and installs them, or records why not.
    async fn load(&self, deployment: &Deployment) {
        let task_type = &deployment.task_type;
        let _loading = self.registry.mark_loading(task_type);
        let current = self.registry.deployed(task_type);
        let loaded = async {
            let stable = deployment.stable.expect("checked by the caller");
            let stable = self.version(task_type, stable, current.as_deref()).await?;
            let candidate = match deployment.candidate {
                Some(number) => Some(Candidate {
                    plugin: self.version(task_type, number, current.as_deref()).await?,
                    percent: deployment.canary_percent,
                }),
                None => None,
            };
            self.registry
                .install_deployed(Deployed {
                    revision: deployment.revision,
                    stable,
                    candidate,
                    canary_since: deployment.canary_since,
                })
                .map_err(|error| error.to_string())
        }
        .await;
        let mut failed = self.failed.lock().expect("deployment sync lock");
        match loaded {
            Ok(()) => {
                failed.remove(task_type);
                tracing::info!(
                    task_type = %task_type,
                    stable = deployment.stable,
                    candidate = deployment.candidate,
                    canary_percent = deployment.canary_percent,
                    revision = deployment.revision,
                    "serving the deployment"
                );
            }
            Err(error) => {
                tracing::error!(task_type = %task_type, revision = deployment.revision, "cannot serve the deployment: {error}");
                self.registry.record_error(task_type, error);
                failed.insert(task_type.clone(), deployment.revision);
            }
        }
    }

    /// Version `number` of `task_type`, reused from what is loaded when it is there.
    async fn version(
        &self,
        task_type: &str,
        number: u64,
        current: Option<&Deployed>,
    ) -> Result<Arc<Plugin>, String> {
        let loaded = current.into_iter().flat_map(|deployed| {
            std::iter::once(&deployed.stable).chain(
                deployed
                    .candidate
                    .as_ref()
                    .map(|candidate| &candidate.plugin),
            )
        });
        for plugin in loaded {
            if plugin.source == (Source::Deployment { number }) {
                return Ok(plugin.clone());
            }
        }
        let path = version_path(task_type, number);
        let name = path.display().to_string();
        let version = self
            .store
            .version(task_type, number)
            .await
            .map_err(|error| format!("{name}: cannot read the version: {error}"))?
            .ok_or_else(|| format!("{name}: the version is not in the database"))?;
        let bytes = self
            .store
            .build(&version.digest)
            .await
            .map_err(|error| format!("{name}: cannot read the build: {error}"))?
            .ok_or_else(|| format!("{name}: build {} is not in the database", version.digest))?;
        let digest = hex::encode(Sha256::digest(&bytes));
        if digest != version.digest {
            return Err(format!(
                "{name}: the stored build's SHA-256 is {digest}, not {}; deploy it again",
                version.digest
            ));
        }
        let named = Named {
            task_type: task_type.to_string(),
            manifest_path: PathBuf::from(format!("{name} (manifest)")),
            path,
            source: Source::Deployment { number },
        };
        let plugin = build_shared(
            &self.loader,
            &self.store,
            named,
            bytes,
            version.manifest.as_deref(),
        )
        .await
        .map_err(|error| error.to_string())?;
        Ok(Arc::new(plugin))
    }

    /// Passes until the host stops: on every `wake` and every `poll`. A pass that cannot
    /// read the database is logged and tried again at the next.
    pub async fn run(self, wake: Arc<Notify>, poll: Duration, shutdown: Shutdown) {
        let mut failing = false;
        loop {
            tokio::select! {
                biased;
                _ = shutdown.reached(Stage::Graceful) => return,
                _ = wake.notified() => {}
                _ = tokio::time::sleep(poll) => {}
            }
            match self.sync().await {
                Ok(()) => failing = false,
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!("cannot read the deployments ({error}); trying again");
                }
                Err(_) => {}
            }
        }
    }
}
