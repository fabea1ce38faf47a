//! The task path: what every host does to run tasks, from the claim to the committed outcome.
//!
//! - [`dispatcher`]: claims due tasks in batches and runs each in the sandbox;
//! - [`ready`]: how many tasks the dispatcher claims ahead of its free slots;
//! - [`in_flight`]: the attempts running here; [`rate`]: per-type start rates;
//! - [`paused`]: the task types paused on this database, left out of claims;
//! - [`services`]: the durable host services handlers call (key-value, effects, follow-ups);
//! - [`completer`]: commits finished attempts (and progress) in batches;
//! - [`lease_keeper`]: extends the leases of tasks this host is running;
//! - [`finished`]: tasks just committed, for API requests waiting on them;
//! - [`estimates`]: attempt times and the backlog, for estimated completion times;
//! - [`tallies`]: how each deployed build did here, written for the canary's verdict.

pub mod completer;
pub mod dispatcher;
pub mod estimates;
pub mod finished;
pub mod in_flight;
pub mod lease_keeper;
pub mod paused;
pub mod rate;
pub mod ready;
pub mod recorder;
pub mod services;
pub mod tallies;
