-- Queue statistics (host/src/store/stats.rs): the leader samples the backlog per task type
-- every `stats_interval` (tier 0) and rolls the samples up into one point per minute (tier 1);
-- samples are kept a day, minutes a week. Times are Unix milliseconds; `at` ends the interval.
CREATE TABLE spool_stats (
    tier               INTEGER NOT NULL,
    at                 INTEGER NOT NULL,
    task_type          TEXT    NOT NULL,
    span_ms            INTEGER NOT NULL,
    pending            INTEGER NOT NULL,
    running            INTEGER NOT NULL,
    failed             INTEGER NOT NULL,
    oldest_pending_ms  INTEGER,
    finished_done      INTEGER NOT NULL,
    finished_failed    INTEGER NOT NULL,
    finished_cancelled INTEGER NOT NULL,
    attempts_timed     INTEGER NOT NULL,
    attempt_p50_ms     INTEGER,
    attempt_p95_ms     INTEGER,
    PRIMARY KEY (tier, at, task_type)
) WITHOUT ROWID;

-- Tasks by the time they finished, for the tasks that finished in a sampling interval. Partial:
-- only finished rows (done, failed, cancelled) have a finished_at, so enqueues and claims never
-- touch it; each finished task adds one entry.
CREATE INDEX async_task_finished ON async_task (finished_at) WHERE finished_at IS NOT NULL;
