-- Paused task types: every host leaves their tasks out of its claims (they stay pending, and
-- enqueues still work) until the type is resumed. Hosts re-read this table at their poll
-- interval. Written by `POST /types/{name}/pause` and `/resume`.
CREATE TABLE task_type_pause (
    task_type TEXT   NOT NULL PRIMARY KEY,
    -- When it was paused, Unix milliseconds.
    paused_at BIGINT NOT NULL
);
