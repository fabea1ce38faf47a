-- The task table, with the same columns and status codes as on every other backend.
-- status: 0 pending, 1 running, 2 done, 3 failed (dead letter), 4 cancelled.
--
-- Times are BIGINT Unix milliseconds, UTC, as on every backend: compact, index-friendly, and
-- free of time-zone settings and of precision differences between servers, so a time means the
-- same thing whichever database or host wrote it.
--
-- Applications may enqueue with plain SQL: every column but task_type and payload has a
-- default, so `INSERT INTO async_task (task_type, payload) VALUES ('report', '{}')` makes a
-- valid task that is due at once.

-- Now, as Unix milliseconds (the clock at the moment of the call, not the transaction start).
CREATE FUNCTION spool_now_ms() RETURNS bigint LANGUAGE sql VOLATILE
    AS $$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

CREATE TABLE async_task (
    -- Never reused. ALWAYS: ids come from the sequence only (Spool's batched enqueue draws
    -- them itself, to match inserted rows to its inputs exactly).
    id               BIGINT   GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME async_task_id_seq) PRIMARY KEY,
    task_type        TEXT     NOT NULL,
    -- json, not jsonb: the database refuses text that is not JSON either way, and json keeps
    -- the text exactly as enqueued, so every payload JSON allows round-trips as an equal
    -- value (jsonb refuses the escape \u0000 and rewrites duplicate keys). Spool never queries
    -- inside payloads; an application that wants to can cast: payload::jsonb.
    payload          JSON     NOT NULL,
    status           SMALLINT NOT NULL DEFAULT 0 CHECK (status BETWEEN 0 AND 4),
    priority         INTEGER  NOT NULL DEFAULT 0,
    -- Counters are BIGINT so every u32 the API accepts fits (max_retry may be 4294967295).
    retry_count      BIGINT   NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_retry        BIGINT   NOT NULL DEFAULT 3 CHECK (max_retry >= 0),
    -- Fencing: every claim increments attempts, which nothing ever resets (an API retry resets
    -- retry_count, not this). A completion names the attempt it belongs to, so a late result
    -- of an old attempt can never land on a newer claim of the same task.
    attempts         BIGINT   NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_run_at      BIGINT   NOT NULL DEFAULT spool_now_ms(),
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
    -- What the latest attempt printed (stdout, stderr, log calls), bounded by the host.
    log              TEXT,
    created_at       BIGINT   NOT NULL DEFAULT spool_now_ms(),
    updated_at       BIGINT   NOT NULL DEFAULT spool_now_ms()
);

-- The dispatch index: exactly the claim's predicate (pending) and ordering (priority first,
-- then due time, then id). Partial, so finished rows never bloat it; a claim reads its first
-- rows in order and stops (docs/databases.md shows the plan on a million rows).
CREATE INDEX async_task_dispatch ON async_task (priority DESC, next_run_at, id) WHERE status = 0;

-- The rescuer's index: running rows by lease expiry.
CREATE INDEX async_task_lease ON async_task (lease_expires_at) WHERE status = 1;

-- Idempotent enqueue: one task per (type, key).
CREATE UNIQUE INDEX async_task_idempotency ON async_task (task_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Listing by status and type, newest first.
CREATE INDEX async_task_listing ON async_task (status, task_type, id);
