-- The archive: finished tasks move here from async_task after `archive_after` (done and
-- cancelled) or `dead_letter_retention` (failed), in small batches, and are purged after
-- `archive_retention` (docs/operations.md, "Archive and retention"). Same columns and types as
-- async_task, plus archived_at; a row keeps its task's id (no AUTO_INCREMENT). A migration that
-- adds a column to async_task adds it here too (and to host/src/store/*/archive.rs).
CREATE TABLE IF NOT EXISTS async_task_archive (
    id               BIGINT       NOT NULL,
    task_type        VARCHAR(64)  NOT NULL,
    payload          JSON         NOT NULL,
    status           TINYINT      NOT NULL,
    priority         INT          NOT NULL,
    retry_count      INT UNSIGNED NOT NULL,
    max_retry        INT UNSIGNED NOT NULL,
    next_run_at      BIGINT       NOT NULL,
    idempotency_key  VARBINARY(1020),
    lease_owner      VARCHAR(255),
    lease_expires_at BIGINT,
    attempted_at     BIGINT,
    finished_at      BIGINT,
    last_error       MEDIUMTEXT,
    result           LONGTEXT,
    progress         TINYINT,
    progress_note    TEXT,
    plugin_version   VARCHAR(255),
    created_at       BIGINT       NOT NULL,
    updated_at       BIGINT       NOT NULL,
    log              MEDIUMTEXT,
    attempts         INT UNSIGNED NOT NULL DEFAULT 0,
    snoozes          INT UNSIGNED NOT NULL DEFAULT 0,
    archived_at      BIGINT       NOT NULL,
    PRIMARY KEY (id),
    -- Purging by age.
    KEY async_task_archive_age (archived_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The archiver finds old finished rows through async_task_finished (finished_at; created with
-- the queue statistics), so claims and completions maintain no further index. A batch of done
-- and cancelled tasks reads past the dead letters that are kept longer (usually few).

-- Purging an archived task forgets its effects too.
CREATE INDEX effect_ledger_task ON effect_ledger (task_id);
