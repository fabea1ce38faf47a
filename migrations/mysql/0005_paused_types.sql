-- Paused task types: every host leaves their tasks out of its claims (they stay pending, and
-- enqueues still work) until the type is resumed. Hosts re-read this table at their poll
-- interval. Written by `POST /types/{name}/pause` and `/resume`. Safe to run again (see 0001).
CREATE TABLE IF NOT EXISTS task_type_pause (
    task_type VARCHAR(64) NOT NULL,
    -- When it was paused, Unix milliseconds.
    paused_at BIGINT      NOT NULL,
    PRIMARY KEY (task_type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
