-- Queue statistics (host/src/store/stats.rs): the leader samples the backlog per task type
-- every `stats_interval` (tier 0) and rolls the samples up into one point per minute (tier 1);
-- samples are kept a day, minutes a week. Times are BIGINT Unix milliseconds; `at` ends the
-- interval. Each statement can run again (see 0001).
CREATE TABLE IF NOT EXISTS spool_stats (
    tier               TINYINT     NOT NULL,
    at                 BIGINT      NOT NULL,
    task_type          VARCHAR(64) NOT NULL,
    span_ms            BIGINT      NOT NULL,
    pending            BIGINT      NOT NULL,
    running            BIGINT      NOT NULL,
    failed             BIGINT      NOT NULL,
    oldest_pending_ms  BIGINT,
    finished_done      BIGINT      NOT NULL,
    finished_failed    BIGINT      NOT NULL,
    finished_cancelled BIGINT      NOT NULL,
    attempts_timed     BIGINT      NOT NULL,
    attempt_p50_ms     BIGINT,
    attempt_p95_ms     BIGINT,
    PRIMARY KEY (tier, at, task_type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Tasks by the time they finished, for the tasks that finished in a sampling interval. MySQL
-- has no partial indexes: unfinished rows sit under NULL.
CREATE INDEX async_task_finished ON async_task (finished_at);
