-- The attempt history: one row per attempt of a task (host/src/store/history.rs). Written in
-- the same transaction as the change that ends the attempt (a completion batch, a rescue, a
-- cancel, a release at shutdown); a task keeps its first attempt and its latest 20.
-- attempt is the task's `attempts` counter after the claim that started the attempt.
-- outcome: 0 done, 1 retry, 2 fail, 3 snooze, 4 crashed, 5 timed out, 6 cancelled,
-- 7 rescued (its host stopped, the lease expired), 8 released (handed back at shutdown).
-- No foreign key: an archived task keeps its history; purging the archive purges it.
-- IF NOT EXISTS: safe to run again (MySQL DDL is not transactional).
CREATE TABLE IF NOT EXISTS async_task_attempt (
    task_id        BIGINT       NOT NULL,
    attempt        INT UNSIGNED NOT NULL,
    host           VARCHAR(255),
    plugin_version VARCHAR(255),
    started_at     BIGINT,
    finished_at    BIGINT       NOT NULL,
    outcome        TINYINT      NOT NULL,
    -- Failure reasons carry the guest's last output lines (as async_task.last_error).
    error          MEDIUMTEXT,
    -- Bounded to 64 KiB plus a note by the host (as async_task.log).
    log            MEDIUMTEXT,
    PRIMARY KEY (task_id, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
