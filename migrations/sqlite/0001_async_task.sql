-- The task table: the essay's columns (id, task_type, payload, status, retry_count, max_retry,
-- next_run_at, created_at, updated_at) plus what a production queue needs.
-- Times are Unix milliseconds (UTC): compact, index-friendly, and unambiguous across backends.
-- status: 0 pending, 1 running, 2 done, 3 failed (dead letter), 4 cancelled.
CREATE TABLE async_task (
    -- AUTOINCREMENT: ids are never reused, even after rows move to an archive.
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type        TEXT    NOT NULL,
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    status           INTEGER NOT NULL DEFAULT 0,
    priority         INTEGER NOT NULL DEFAULT 0,
    retry_count      INTEGER NOT NULL DEFAULT 0,
    max_retry        INTEGER NOT NULL DEFAULT 3,
    next_run_at      INTEGER NOT NULL,
    idempotency_key  TEXT,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    attempted_at     INTEGER,
    finished_at      INTEGER,
    last_error       TEXT,
    result           TEXT,
    progress         INTEGER,
    progress_note    TEXT,
    plugin_version   TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);

-- The dispatch index: exactly the claim's predicate (pending) and ordering
-- (priority first, then due time, then id). Partial, so done rows never bloat it.
CREATE INDEX async_task_dispatch ON async_task (priority DESC, next_run_at, id) WHERE status = 0;

-- The rescuer's index: running rows by lease expiry.
CREATE INDEX async_task_lease ON async_task (lease_expires_at) WHERE status = 1;

-- Idempotent enqueue: one task per (type, key).
CREATE UNIQUE INDEX async_task_idempotency ON async_task (task_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Listing by status and type, newest first.
CREATE INDEX async_task_listing ON async_task (status, task_type, id);
