-- Handler builds kept in the shared database, so one deploy reaches every host
-- (host/src/store/deployments.rs, docs/operations.md "Deploying to many hosts").
--
-- spool_build: a component's bytes by their SHA-256 (hex), in chunks of at most 1 MiB, so no
-- statement carries more than a server's packet limit allows. Content-addressed: the same
-- bytes deployed twice, or under two types, are stored once. created_at lets the pruning of
-- builds no version names spare the chunks of a deploy still being written.
CREATE TABLE spool_build (
    digest     TEXT    NOT NULL,
    chunk      INTEGER NOT NULL,
    bytes      BYTEA   NOT NULL,
    created_at BIGINT  NOT NULL,
    PRIMARY KEY (digest, chunk)
);

-- spool_artifact: compiled code of deployed builds, as the host that compiled it cached it
-- (machine code and its HMAC tag under the key the hosts share), so the other hosts of the
-- database load it instead of compiling the build again. name: ENGINE/DIGEST.EXT, where
-- ENGINE names the engine configuration; chunks as in spool_build.
CREATE TABLE spool_artifact (
    name       TEXT    NOT NULL,
    digest     TEXT    NOT NULL,
    chunk      INTEGER NOT NULL,
    bytes      BYTEA   NOT NULL,
    created_at BIGINT  NOT NULL,
    PRIMARY KEY (name, chunk)
);

-- spool_version: every deploy of a type, numbered from 1 per type: which build, with which
-- manifest, when, by which token from which address.
CREATE TABLE spool_version (
    task_type   TEXT   NOT NULL,
    number      BIGINT NOT NULL,
    digest      TEXT   NOT NULL,
    size        BIGINT NOT NULL,
    manifest    TEXT,
    deployed_at BIGINT NOT NULL,
    deployed_by TEXT   NOT NULL,
    origin      TEXT,
    PRIMARY KEY (task_type, number)
);

-- spool_deployment: one row per deployed type: the stable version, the candidate and the share
-- of attempts it gets, and a revision every change increments (hosts compare revisions to see
-- what changed). change_id names the change that wrote the row last, so the statements of one
-- change find the row only if their own change applied.
CREATE TABLE spool_deployment (
    task_type         TEXT    PRIMARY KEY,
    last_version      BIGINT  NOT NULL DEFAULT 0,
    stable_version    BIGINT,
    candidate_version BIGINT,
    canary_percent    INTEGER NOT NULL DEFAULT 0,
    canary_since      BIGINT,
    revision          BIGINT  NOT NULL DEFAULT 0,
    change_id         TEXT    NOT NULL DEFAULT '',
    updated_at        BIGINT  NOT NULL DEFAULT 0
);

-- spool_deploy_event: the deployment history: deploy, canary, promote, rollback, remove.
CREATE TABLE spool_deploy_event (
    id        BIGSERIAL PRIMARY KEY,
    task_type TEXT   NOT NULL,
    at        BIGINT NOT NULL,
    action    TEXT   NOT NULL,
    version   BIGINT,
    actor     TEXT   NOT NULL,
    origin    TEXT,
    detail    TEXT
);
CREATE INDEX spool_deploy_event_by_type ON spool_deploy_event (task_type, id);

-- spool_build_tally: how each build did, as each host counted its attempts: per (type, build,
-- host, window), where the window is the candidate's trial start (0 outside a trial). Hosts
-- write their counts every few seconds; the leader's canary verdict sums them over hosts.
-- wall_buckets: a JSON object of attempt times in logarithmic buckets (plugins/tally.rs).
CREATE TABLE spool_build_tally (
    task_type     TEXT   NOT NULL,
    digest        TEXT   NOT NULL,
    host_id       TEXT   NOT NULL,
    window_ms     BIGINT NOT NULL,
    attempts      BIGINT NOT NULL,
    failures      BIGINT NOT NULL,
    wall_ms_total BIGINT NOT NULL,
    wall_buckets  TEXT   NOT NULL,
    fuel_total    BIGINT NOT NULL,
    fuel_attempts BIGINT NOT NULL,
    memory_peak   BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (task_type, digest, host_id, window_ms)
);

-- Hosts LISTEN on spool_deploy and load a change at once; once per statement, on commit.
CREATE FUNCTION spool_notify_deploy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('spool_deploy', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER spool_deployment_changed
    AFTER INSERT OR UPDATE OR DELETE ON spool_deployment
    FOR EACH STATEMENT EXECUTE FUNCTION spool_notify_deploy();
