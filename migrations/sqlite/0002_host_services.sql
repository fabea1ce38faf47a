-- The task log: what the latest attempt printed (stdout, stderr, log calls), bounded by the host.
ALTER TABLE async_task ADD COLUMN log TEXT;

-- The effect ledger: effects a handler recorded as done, per task type. A row is written
-- (and committed) by `record-effect` before the call returns to the handler.
CREATE TABLE effect_ledger (
    task_type   TEXT    NOT NULL,
    effect_key  TEXT    NOT NULL,
    task_id     INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (task_type, effect_key)
) WITHOUT ROWID;

-- A key-value store per task type (caches, counters).
CREATE TABLE task_kv (
    task_type  TEXT    NOT NULL,
    kv_key     TEXT    NOT NULL,
    kv_value   TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (task_type, kv_key)
) WITHOUT ROWID;
