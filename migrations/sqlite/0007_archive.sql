-- The archive: finished tasks move here from async_task after `archive_after` (done and
-- cancelled) or `dead_letter_retention` (failed), in small batches, and are purged after
-- `archive_retention` (docs/operations.md, "Archive and retention"). Same columns as
-- async_task, plus archived_at; a row keeps its task's id. A migration that adds a column to
-- async_task adds it here too (and to host/src/store/*/archive.rs).
CREATE TABLE async_task_archive (
    id               INTEGER PRIMARY KEY,
    task_type        TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    status           INTEGER NOT NULL,
    priority         INTEGER NOT NULL,
    retry_count      INTEGER NOT NULL,
    max_retry        INTEGER NOT NULL,
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
    updated_at       INTEGER NOT NULL,
    log              TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    snoozes          INTEGER NOT NULL DEFAULT 0,
    archived_at      INTEGER NOT NULL
);

-- Purging by age.
CREATE INDEX async_task_archive_age ON async_task_archive (archived_at);

-- The archiver finds old finished rows through async_task_finished (finished_at; created with
-- the queue statistics), so claims and completions maintain no further index. A batch of done
-- and cancelled tasks reads past the dead letters that are kept longer (usually few).

-- Purging an archived task forgets its effects too.
CREATE INDEX effect_ledger_task ON effect_ledger (task_id);
