//! End-to-end tests: each starts the real `spool` binary against a real SQLite file with real
//! compiled plugins, and drives it over HTTP (and the CLI) as a user would.

mod util;

mod api_errors;
mod capabilities;
mod cli;
mod commands;
mod crash;
mod hot_reload;
mod languages;
mod openapi;
mod outage;
mod plugins;
mod queue;
mod retries;
mod sandbox_limits;
mod services;
mod shutdown;
