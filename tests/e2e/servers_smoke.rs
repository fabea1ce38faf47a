//! The test database servers themselves (`servers.rs`, `cargo xtask db`): fresh databases are
//! empty and apart, and a stopped server refuses connections until it starts again at the same
//! URL with its data. Skipped when the run has no servers.

use crate::servers::{self, Backend, PrivateServer};

/// Two fresh databases on the shared server: different, empty, and a table in one is not in
/// the other.
fn fresh_databases_are_empty_and_apart(backend: Backend) {
    let first = servers::fresh_database(backend);
    let second = servers::fresh_database(backend);
    assert_ne!(first, second);
    servers::execute(&first, "CREATE TABLE probe (id INT PRIMARY KEY)").unwrap();
    servers::execute(&first, "INSERT INTO probe (id) VALUES (1)").unwrap();
    let missing = servers::execute(&second, "SELECT id FROM probe");
    assert!(
        missing.is_err(),
        "a table of one fresh database is in another"
    );
}

/// A private server: stopped, it refuses connections; started again, its URL answers and its
/// data is still there.
fn a_stopped_server_comes_back_with_its_data(backend: Backend) {
    let Some(server) = PrivateServer::new(backend) else {
        return;
    };
    let database = server.fresh_database();
    servers::execute(&database, "CREATE TABLE kept (id INT PRIMARY KEY)").unwrap();
    servers::execute(&database, "INSERT INTO kept (id) VALUES (7)").unwrap();
    server.stop();
    assert!(
        !servers::connects(server.url()),
        "the stopped server still answers"
    );
    server.start();
    assert!(
        servers::connects(server.url()),
        "the started server does not answer"
    );
    servers::execute(&database, "SELECT id FROM kept").unwrap();
}

#[test]
fn fresh_postgres_databases_are_empty_and_apart() {
    if servers::postgres_url().is_none() {
        return;
    }
    fresh_databases_are_empty_and_apart(Backend::Postgres);
}

#[test]
fn fresh_mysql_databases_are_empty_and_apart() {
    if servers::mysql_url().is_none() {
        return;
    }
    fresh_databases_are_empty_and_apart(Backend::MySql);
}

#[test]
fn a_stopped_postgres_server_comes_back_with_its_data() {
    a_stopped_server_comes_back_with_its_data(Backend::Postgres);
}

#[test]
fn a_stopped_mysql_server_comes_back_with_its_data() {
    a_stopped_server_comes_back_with_its_data(Backend::MySql);
}
