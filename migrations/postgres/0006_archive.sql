-- The archive: finished tasks move here from async_task after `archive_after` (done and
-- cancelled) or `dead_letter_retention` (failed), in small batches, and are purged after
-- `archive_retention` (docs/operations.md, "Archive and retention"). Same columns and types as
-- async_task, plus archived_at; a row keeps its task's id. A migration that adds a column to
-- async_task adds it here too (and to host/src/store/*/archive.rs).
CREATE TABLE async_task_archive (
    id               BIGINT   PRIMARY KEY,
    task_type        TEXT     NOT NULL,
    payload          JSON     NOT NULL,
    status           SMALLINT NOT NULL,
    priority         INTEGER  NOT NULL,
    retry_count      BIGINT   NOT NULL,
    max_retry        BIGINT   NOT NULL,
    attempts         BIGINT   NOT NULL,
    next_run_at      BIGINT   NOT NULL,
    idempotency_key  TEXT,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    attempted_at     BIGINT,
    finished_at      BIGINT,
    last_error       TEXT,
    result           TEXT,
    progress         SMALLINT,
    progress_note    TEXT,
    plugin_version   TEXT,
    log              TEXT,
    created_at       BIGINT   NOT NULL,
    updated_at       BIGINT   NOT NULL,
    snoozes          INTEGER  NOT NULL DEFAULT 0,
    archived_at      BIGINT   NOT NULL
);

-- Purging by age.
CREATE INDEX async_task_archive_age ON async_task_archive (archived_at);

-- The archiver finds old finished rows through async_task_finished (finished_at; created with
-- the queue statistics), so claims and completions maintain no further index. A batch of done
-- and cancelled tasks reads past the dead letters that are kept longer (usually few).

-- Purging an archived task forgets its effects too.
CREATE INDEX effect_ledger_task ON effect_ledger (task_id);
