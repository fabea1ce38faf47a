//! End-to-end tests: each starts the real `spool` binary against a real SQLite file with real
//! compiled plugins, and drives it over HTTP (and the CLI) as a user would.

mod servers;
mod util;

mod alerts;
mod api_auth;
mod api_contract;
mod api_errors;
mod api_guard;
mod api_limits;
mod api_schemathesis;
mod approval_example;
mod archive;
mod attempts;
mod capabilities;
mod chaos;
mod cli;
mod client_side;
mod clock_skew;
mod commands;
mod control;
mod crash;
mod dashboard;
mod grants;
mod guest_errors;
mod guest_limits;
mod hot_reload;
mod http_client;
mod languages;
mod long_poll;
mod many_hosts;
mod metrics;
mod openapi;
mod outage;
mod plugin_files;
mod plugins;
mod queue;
mod retries;
mod sandbox_limits;
mod schedules;
mod server_outage;
mod servers_smoke;
mod services;
mod shutdown;
mod slow_compile;
mod sql_enqueue;
