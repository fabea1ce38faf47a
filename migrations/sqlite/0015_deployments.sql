-- Handler builds kept in the database, so one deploy reaches every host on the file
-- (host/src/store/deployments.rs, docs/operations.md "Deploying to many hosts"). The tables are
-- those of the PostgreSQL migration 0014; hosts poll spool_deployment's revisions.
CREATE TABLE spool_build (
    digest     TEXT    NOT NULL,
    chunk      INTEGER NOT NULL,
    bytes      BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (digest, chunk)
) WITHOUT ROWID;

CREATE TABLE spool_version (
    task_type   TEXT    NOT NULL,
    number      INTEGER NOT NULL,
    digest      TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    manifest    TEXT,
    deployed_at INTEGER NOT NULL,
    deployed_by TEXT    NOT NULL,
    origin      TEXT,
    PRIMARY KEY (task_type, number)
);

CREATE TABLE spool_deployment (
    task_type         TEXT    PRIMARY KEY,
    last_version      INTEGER NOT NULL DEFAULT 0,
    stable_version    INTEGER,
    candidate_version INTEGER,
    canary_percent    INTEGER NOT NULL DEFAULT 0,
    canary_since      INTEGER,
    revision          INTEGER NOT NULL DEFAULT 0,
    change_id         TEXT    NOT NULL DEFAULT '',
    updated_at        INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE spool_deploy_event (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type TEXT    NOT NULL,
    at        INTEGER NOT NULL,
    action    TEXT    NOT NULL,
    version   INTEGER,
    actor     TEXT    NOT NULL,
    origin    TEXT,
    detail    TEXT
);
CREATE INDEX spool_deploy_event_by_type ON spool_deploy_event (task_type, id);

CREATE TABLE spool_build_tally (
    task_type     TEXT    NOT NULL,
    digest        TEXT    NOT NULL,
    host_id       TEXT    NOT NULL,
    window_ms     INTEGER NOT NULL,
    attempts      INTEGER NOT NULL,
    failures      INTEGER NOT NULL,
    wall_ms_total INTEGER NOT NULL,
    wall_buckets  TEXT    NOT NULL,
    fuel_total    INTEGER NOT NULL,
    fuel_attempts INTEGER NOT NULL,
    memory_peak   INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (task_type, digest, host_id, window_ms)
);

CREATE TABLE spool_artifact (
    name       TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    chunk      INTEGER NOT NULL,
    bytes      BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (name, chunk)
) WITHOUT ROWID;
