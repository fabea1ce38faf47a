-- Queue statistics (host/src/store/stats.rs): the leader samples the backlog per task type
-- every `stats_interval` (tier 0) and rolls the samples up into one point per minute (tier 1);
-- samples are kept a day, minutes a week. Times are BIGINT Unix milliseconds; `at` ends the
-- interval.
CREATE TABLE spool_stats (
    tier               SMALLINT NOT NULL,
    at                 BIGINT   NOT NULL,
    task_type          TEXT     NOT NULL,
    span_ms            BIGINT   NOT NULL,
    pending            BIGINT   NOT NULL,
    running            BIGINT   NOT NULL,
    failed             BIGINT   NOT NULL,
    oldest_pending_ms  BIGINT,
    finished_done      BIGINT   NOT NULL,
    finished_failed    BIGINT   NOT NULL,
    finished_cancelled BIGINT   NOT NULL,
    attempts_timed     BIGINT   NOT NULL,
    attempt_p50_ms     BIGINT,
    attempt_p95_ms     BIGINT,
    PRIMARY KEY (tier, at, task_type)
);

-- Tasks by the time they finished, for the tasks that finished in a sampling interval. Partial:
-- only finished rows (done, failed, cancelled) have a finished_at, so enqueues and claims never
-- add to it; each finished task adds one entry.
CREATE INDEX async_task_finished ON async_task (finished_at) WHERE finished_at IS NOT NULL;
