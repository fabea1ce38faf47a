-- Defaults for every column an application does not have to write, so that a plain
--     INSERT INTO async_task (task_type, payload) VALUES ('report', '{}')
-- is a valid task, due now, as on PostgreSQL and MySQL/MariaDB (docs/sql-enqueue.md).
--
-- SQLite cannot change a column's default, so the table is rebuilt: a new table with the same
-- columns (in the same order), constraints and defaults plus the new ones, the rows copied
-- with their ids, the old table dropped, the new one renamed, and every index recreated
-- exactly as before. The migration runs in one transaction: it happens entirely or not at all.
--
-- "Now" in Unix milliseconds is computed from julianday('now'), which every SQLite version
-- has, not from unixepoch('subsec'), which needs SQLite 3.42: an application may write this
-- file through an older SQLite library than the one bundled into Spool (Debian 12's is 3.40,
-- where unixepoch('subsec') is NULL and the insert would fail). julianday('now') carries the
-- time to the millisecond; ROUND removes the floating-point error of the conversion.
CREATE TABLE async_task_new (
    -- AUTOINCREMENT: ids are never reused, even after rows move to an archive.
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type        TEXT    NOT NULL,
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    status           INTEGER NOT NULL DEFAULT 0,
    priority         INTEGER NOT NULL DEFAULT 0,
    retry_count      INTEGER NOT NULL DEFAULT 0,
    max_retry        INTEGER NOT NULL DEFAULT 3,
    next_run_at      INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)),
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
    created_at       INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)),
    updated_at       INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)),
    log              TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0
);

INSERT INTO async_task_new (
    id, task_type, payload, status, priority, retry_count, max_retry, next_run_at,
    idempotency_key, lease_owner, lease_expires_at, attempted_at, finished_at, last_error,
    result, progress, progress_note, plugin_version, created_at, updated_at, log, attempts)
SELECT
    id, task_type, payload, status, priority, retry_count, max_retry, next_run_at,
    idempotency_key, lease_owner, lease_expires_at, attempted_at, finished_at, last_error,
    result, progress, progress_note, plugin_version, created_at, updated_at, log, attempts
FROM async_task;

-- AUTOINCREMENT's high-water mark lives in sqlite_sequence and dies with the old table; the
-- copy only set the new table's to the largest id still present. Carry the old one over, so
-- the ids of deleted rows are not handed out again. (RENAME below moves the entry along.)
UPDATE sqlite_sequence
SET seq = MAX(seq, (SELECT seq FROM sqlite_sequence WHERE name = 'async_task'))
WHERE name = 'async_task_new'
  AND EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'async_task');
INSERT INTO sqlite_sequence (name, seq)
SELECT 'async_task_new', seq FROM sqlite_sequence
WHERE name = 'async_task'
  AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'async_task_new');

DROP TABLE async_task;
ALTER TABLE async_task_new RENAME TO async_task;

-- The indexes, exactly as 0001 created them (dropping the old table dropped them).

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
