//! What a handler may reach beyond its own memory: folders, environment variables, outbound
//! HTTP destinations and follow-up tasks. A task type's manifest grants them
//! (`crate::plugins::manifest`); the sandbox enforces them on every attempt.

use serde::Serialize;
use spool_rules::authority::{Authority, Host};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use super::grants::{GrantError, GrantsRoot};

/// Default of `[enqueue] max_tasks`: follow-ups one attempt may enqueue.
pub const DEFAULT_ENQUEUE_TASKS: u32 = 100;
/// The largest `[enqueue] max_tasks`.
pub const MAX_ENQUEUE_TASKS: u32 = 10_000;
/// Default of `[enqueue] max_bytes`: follow-up payload bytes per attempt.
pub const DEFAULT_ENQUEUE_BYTES: usize = 1 << 20;
/// Default of `[enqueue] max_depth`: how many follow-ups deep a chain may go below a task
/// enqueued from outside. The per-attempt quota bounds each generation; this bounds how many
/// generations there are, so a type allowed to enqueue itself makes at most
/// `max_tasks ^ max_depth` tasks from one root instead of growing without end.
pub const DEFAULT_ENQUEUE_DEPTH: u32 = 20;
/// The largest `[enqueue] max_depth` (a chain of one follow-up per task, such as paging through
/// a long listing, may need many).
pub const MAX_ENQUEUE_DEPTH: u32 = 100_000;

/// What a handler may reach beyond its own memory; empty means nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Capabilities {
    /// Host folders mapped into the guest.
    pub dirs: Vec<GrantedDir>,
    /// Environment variables the guest sees (names only are shown by the API).
    #[serde(serialize_with = "names_only")]
    #[schema(value_type = Vec<String>)]
    pub env: Vec<(String, String)>,
    /// Outbound HTTP destinations.
    pub http_allow: Vec<String>,
    /// Follow-up tasks the guest may enqueue.
    pub enqueue: EnqueueGrant,
}

/// Follow-up tasks a guest may enqueue through the `enqueue` import, per attempt.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct EnqueueGrant {
    /// Task types the guest may enqueue; empty: none (the default).
    pub allow: Vec<String>,
    /// Most follow-ups one attempt may enqueue.
    pub max_tasks: u32,
    /// Most payload bytes one attempt may enqueue, all its follow-ups together.
    pub max_bytes: usize,
    /// The deepest a follow-up may be ([`crate::task::Task::depth`]): a task at this depth
    /// may enqueue none.
    pub max_depth: u32,
    /// A follow-up's priority is clamped into `min_priority..=max_priority`.
    pub min_priority: i32,
    pub max_priority: i32,
}

impl Default for EnqueueGrant {
    /// Nothing allowed.
    fn default() -> Self {
        EnqueueGrant {
            allow: Vec::new(),
            max_tasks: DEFAULT_ENQUEUE_TASKS,
            max_bytes: DEFAULT_ENQUEUE_BYTES,
            max_depth: DEFAULT_ENQUEUE_DEPTH,
            min_priority: i32::MIN,
            max_priority: 0,
        }
    }
}

impl EnqueueGrant {
    /// Whether the guest may enqueue tasks of `task_type`.
    pub fn permits(&self, task_type: &str) -> bool {
        self.allow.iter().any(|allowed| allowed == task_type)
    }
}

fn names_only<S: serde::Serializer>(
    env: &[(String, String)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(env.iter().map(|(name, _)| name))
}

/// A folder grant, checked to exist beneath the grants root.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct GrantedDir {
    /// The folder, relative to the grants root.
    #[schema(value_type = String)]
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
    /// The root the folder is opened beneath on every attempt.
    #[serde(skip)]
    pub root: Arc<GrantsRoot>,
}

impl GrantedDir {
    /// Opens the folder beneath the root for one attempt, following no symbolic link.
    pub fn open(&self) -> Result<OwnedFd, GrantError> {
        self.root.open_grant(&self.host)
    }
}

impl Capabilities {
    /// Whether an outbound HTTP request to `host:port` is allowed.
    /// Entries are `host[:port]` ([`Authority`]); one without a port allows every port.
    pub fn http_permits(&self, host: &str, port: u16) -> bool {
        let Some(host) = Host::parse(host) else {
            return false;
        };
        self.http_allow
            .iter()
            .filter_map(|entry| Authority::parse(entry))
            .any(|allowed| allowed.admits(&host, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_allow_list_matches_host_and_port() {
        let caps = Capabilities {
            http_allow: vec!["api.example.com".into(), "127.0.0.1:8025".into()],
            ..Default::default()
        };
        assert!(caps.http_permits("api.example.com", 443));
        assert!(caps.http_permits("API.example.com", 80));
        assert!(caps.http_permits("127.0.0.1", 8025));
        assert!(!caps.http_permits("127.0.0.1", 8026));
        assert!(!caps.http_permits("evil.example.com", 443));
        assert!(!caps.http_permits("api.example.com.evil.net", 443));
        let v6 = Capabilities {
            http_allow: vec!["[::1]:8080".into()],
            ..Default::default()
        };
        assert!(v6.http_permits("[::1]", 8080));
        assert!(v6.http_permits("::1", 8080));
        assert!(!v6.http_permits("::1", 8081));
        assert!(!Capabilities::default().http_permits("api.example.com", 443));
    }
}
