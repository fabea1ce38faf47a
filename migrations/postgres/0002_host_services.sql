-- The effect ledger: effects a handler recorded as done, per task type. A row is written
-- (and committed) by `record-effect` before the call returns to the handler.
CREATE TABLE effect_ledger (
    task_type   TEXT   NOT NULL,
    effect_key  TEXT   NOT NULL,
    task_id     BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (task_type, effect_key)
);

-- A key-value store per task type (caches, counters).
CREATE TABLE task_kv (
    task_type  TEXT   NOT NULL,
    kv_key     TEXT   NOT NULL,
    kv_value   TEXT   NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (task_type, kv_key)
);

-- Host-wide values the hosts sharing this database agree on (for example the key that
-- authenticates compiled-code cache artifacts). Written once, read many times.
CREATE TABLE spool_meta (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);

-- Leadership: one row per role (maintenance); the owner holds it until expires_at and renews
-- it while alive. Another host takes over once the lease has expired.
CREATE TABLE spool_leader (
    role       TEXT   NOT NULL PRIMARY KEY,
    owner      TEXT   NOT NULL,
    expires_at BIGINT NOT NULL
);
