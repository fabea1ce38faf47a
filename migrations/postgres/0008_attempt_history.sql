-- The attempt history: one row per attempt of a task (host/src/store/history.rs). Written in
-- the same statement or transaction as the change that ends the attempt (a completion batch,
-- a rescue, a cancel, a release at shutdown); a task keeps its first attempt and its latest 20.
-- attempt is the task's `attempts` counter after the claim that started the attempt.
-- outcome: 0 done, 1 retry, 2 fail, 3 snooze, 4 crashed, 5 timed out, 6 cancelled,
-- 7 rescued (its host stopped, the lease expired), 8 released (handed back at shutdown).
-- No foreign key: an archived task keeps its history; purging the archive purges it.
CREATE TABLE async_task_attempt (
    task_id        BIGINT   NOT NULL,
    attempt        BIGINT   NOT NULL,
    host           TEXT,
    plugin_version TEXT,
    started_at     BIGINT,
    finished_at    BIGINT   NOT NULL,
    outcome        SMALLINT NOT NULL CHECK (outcome BETWEEN 0 AND 8),
    error          TEXT,
    log            TEXT,
    PRIMARY KEY (task_id, attempt)
);
