//! Pieces the benchmarks share.

use spool::sandbox::{FollowUp, ServiceError, TaskServices};

/// Host services that answer like an empty database: handlers' ledger and key-value calls
/// cost what crossing the interface costs, not what SQLite does.
pub struct EmptyServices;

#[async_trait::async_trait]
impl TaskServices for EmptyServices {
    fn progress(&self, _: u64, _: u8, _: String) {}
    async fn effect_done(&self, _: &str, _: &str) -> Result<bool, ServiceError> {
        Ok(false)
    }
    async fn record_effect(&self, _: &str, _: &str, _: u64) -> Result<(), ServiceError> {
        Ok(())
    }
    async fn kv_get(&self, _: &str, _: &str) -> Result<Option<String>, ServiceError> {
        Ok(None)
    }
    async fn kv_set(&self, _: &str, _: &str, _: &str) -> Result<(), ServiceError> {
        Ok(())
    }
    async fn kv_delete(&self, _: &str, _: &str) -> Result<bool, ServiceError> {
        Ok(false)
    }
    async fn enqueue(&self, _: FollowUp) -> Result<Result<u64, String>, ServiceError> {
        Ok(Err("not in the benchmark".into()))
    }
}

/// The sandbox options a host with default settings runs with: its pooling setting and
/// concurrency, from [`spool::Config`], through the same [`SandboxOptions::for_host`] the host
/// uses.
pub fn host_sandbox_options() -> spool::sandbox::SandboxOptions {
    let config = spool::Config::from_settings(spool::config::Settings::default())
        .expect("the default settings are valid");
    spool::sandbox::SandboxOptions::for_host(config.pooling, config.concurrency)
}
