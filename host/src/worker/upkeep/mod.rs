//! Upkeep of the shared queue, run by one host at a time: the leader.
//!
//! - [`leader`]: elects the one host that runs the services below;
//! - [`rescuer`]: returns tasks whose host died (lease expired) to the queue;
//! - [`archiver`]: moves finished tasks to the archive and purges it;
//! - [`sampler`]: keeps the backlog history behind `GET /stats`;
//! - [`scheduler`]: enqueues the ticks of periodic tasks;
//! - [`canary`]: judges deployed candidates on trial: rolls them back or promotes them.

pub mod archiver;
pub mod canary;
pub mod leader;
pub mod rescuer;
pub mod sampler;
pub mod scheduler;
