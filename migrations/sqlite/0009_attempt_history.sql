-- The attempt history: one row per attempt of a task (host/src/store/history.rs). Written in
-- the same transaction as the change that ends the attempt (a completion batch, a rescue, a
-- cancel, a release at shutdown); a task keeps its first attempt and its latest 20.
-- attempt is the task's `attempts` counter after the claim that started the attempt.
-- outcome: 0 done, 1 retry, 2 fail, 3 snooze, 4 crashed, 5 timed out, 6 cancelled,
-- 7 rescued (its host stopped, the lease expired), 8 released (handed back at shutdown).
-- No foreign key: an archived task keeps its history; purging the archive purges it.
-- WITHOUT ROWID: the primary key is the table, one b-tree write per attempt.
CREATE TABLE async_task_attempt (
    task_id        INTEGER NOT NULL,
    attempt        INTEGER NOT NULL,
    host           TEXT,
    plugin_version TEXT,
    started_at     INTEGER,
    finished_at    INTEGER NOT NULL,
    outcome        INTEGER NOT NULL,
    error          TEXT,
    log            TEXT,
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;
