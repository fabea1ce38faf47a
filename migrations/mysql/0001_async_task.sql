-- The task table and the host services' tables, as on SQLite after all of its migrations
-- (migrations/sqlite/): the same table names, columns, status codes and meanings.
--
-- MySQL and MariaDB commit every DDL statement on its own: a migration cannot be rolled back
-- as a whole. Each statement here therefore stands alone and can run again: CREATE TABLE IF NOT
-- EXISTS with its indexes inline, so a table never exists without its indexes, and a file
-- interrupted half-way is completed by running it again (after removing its unfinished row
-- from _sqlx_migrations). A later migration that alters a table should do one thing per
-- statement, each safe to repeat, for the same reason.
--
-- Times are BIGINT Unix milliseconds, UTC: the representation every backend shares (compact,
-- index-friendly, and free of the session time zone). The defaults compute "now" in milliseconds
-- from UNIX_TIMESTAMP() (whole seconds since the epoch, independent of the session time zone)
-- plus the millisecond part of CURRENT_TIMESTAMP(6) (a time zone shifts whole minutes, never the
-- fraction); both read the statement's start time. Converting a local CURRENT_TIMESTAMP with
-- UNIX_TIMESTAMP(...) instead would be ambiguous in a session zone's repeated daylight-saving hour.
--
-- Defaults make a plain INSERT from application SQL a valid task, due at once:
--     INSERT INTO async_task (task_type, payload) VALUES ('report', '{}');
--
-- Text compares byte for byte, as on SQLite: the tables' collation is utf8mb4_bin, and keys that
-- must be unique exactly as given (idempotency, effect and key-value keys) are VARBINARY, which
-- also ignores no trailing spaces. Their lengths hold the host's limits: idempotency keys of 255
-- characters (host/src/enqueue.rs), up to 4 bytes each in UTF-8, so 1020 bytes; effect and
-- key-value keys of 1024 bytes (host/src/sandbox/host_api.rs).
--
-- status (TINYINT, the essay's): 0 pending, 1 running, 2 done, 3 failed (dead letter), 4 cancelled.
CREATE TABLE IF NOT EXISTS async_task (
    id               BIGINT       NOT NULL AUTO_INCREMENT,
    -- A task type name (letters, digits, _ and -, at most 64: the host validates it).
    task_type        VARCHAR(64)  NOT NULL,
    -- JSON: MySQL stores it in its binary JSON format; MariaDB makes it LONGTEXT with a
    -- json_valid CHECK. Either way a payload that is not JSON is refused.
    payload          JSON         NOT NULL,
    status           TINYINT      NOT NULL DEFAULT 0,
    priority         INT          NOT NULL DEFAULT 0,
    retry_count      INT UNSIGNED NOT NULL DEFAULT 0,
    max_retry        INT UNSIGNED NOT NULL DEFAULT 3,
    next_run_at      BIGINT       NOT NULL DEFAULT (UNIX_TIMESTAMP() * 1000 + MICROSECOND(CURRENT_TIMESTAMP(6)) DIV 1000),
    idempotency_key  VARBINARY(1020),
    lease_owner      VARCHAR(255),
    lease_expires_at BIGINT,
    attempted_at     BIGINT,
    finished_at      BIGINT,
    -- Failure reasons carry the guest's last output lines.
    last_error       MEDIUMTEXT,
    -- Bounded by the host's max_result (1 MiB by default, configurable): LONGTEXT leaves the
    -- bound to the host (and to the server's max_allowed_packet).
    result           LONGTEXT,
    progress         TINYINT,
    -- At most 4 KiB (host/src/sandbox/host_api.rs).
    progress_note    TEXT,
    plugin_version   VARCHAR(255),
    created_at       BIGINT       NOT NULL DEFAULT (UNIX_TIMESTAMP() * 1000 + MICROSECOND(CURRENT_TIMESTAMP(6)) DIV 1000),
    updated_at       BIGINT       NOT NULL DEFAULT (UNIX_TIMESTAMP() * 1000 + MICROSECOND(CURRENT_TIMESTAMP(6)) DIV 1000),
    -- What the latest attempt printed, bounded to 64 KiB plus a note by the host: more than TEXT holds.
    log              MEDIUMTEXT,
    -- Fencing: every claim increments it and nothing resets it (see migrations/sqlite/0003).
    attempts         INT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    -- The dispatch index, in the claim's order: pending rows (status 0) by priority (higher
    -- first), due time, id. The claim reads it from the start of status 0 and stops after `limit`
    -- matching entries. MySQL has no partial indexes, hence status in front. task_type rides at
    -- the end so the claim's type filter is checked in the index (index condition pushdown)
    -- without reading the row. DESC is honoured by MySQL 8.0 and MariaDB 10.8+; MariaDB 10.6 and
    -- 10.7 parse it and build the index ascending, and their claims sort the due pending rows
    -- instead of reading the first ones (docs/databases.md).
    KEY async_task_dispatch (status, priority DESC, next_run_at, id, task_type),
    -- The rescuer's index: running rows by lease expiry.
    KEY async_task_lease (status, lease_expires_at),
    -- Idempotent enqueue: one task per (type, key). Rows without a key (NULL) never collide.
    UNIQUE KEY async_task_idempotency (task_type, idempotency_key),
    -- Listing by status and type, newest first; counts per state and type.
    KEY async_task_listing (status, task_type, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The effect ledger: effects a handler recorded as done, per task type. A row is written (and
-- committed) by `record-effect` before the call returns to the handler.
CREATE TABLE IF NOT EXISTS effect_ledger (
    task_type   VARCHAR(64)     NOT NULL,
    effect_key  VARBINARY(1024) NOT NULL,
    task_id     BIGINT          NOT NULL,
    recorded_at BIGINT          NOT NULL,
    PRIMARY KEY (task_type, effect_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A key-value store per task type (caches, counters). Values are at most 1 MiB.
CREATE TABLE IF NOT EXISTS task_kv (
    task_type  VARCHAR(64)     NOT NULL,
    kv_key     VARBINARY(1024) NOT NULL,
    kv_value   MEDIUMTEXT      NOT NULL,
    updated_at BIGINT          NOT NULL,
    PRIMARY KEY (task_type, kv_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Host-wide values the hosts sharing this database agree on (for example the key that
-- authenticates compiled-code cache artifacts). Written once, read many times.
CREATE TABLE IF NOT EXISTS spool_meta (
    name  VARCHAR(191) NOT NULL,
    value TEXT         NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Leadership: one row per role (maintenance); the owner holds it until expires_at and renews it
-- while alive. Another host takes over once the lease has expired.
CREATE TABLE IF NOT EXISTS spool_leader (
    role       VARCHAR(191) NOT NULL,
    owner      VARCHAR(255) NOT NULL,
    expires_at BIGINT       NOT NULL,
    PRIMARY KEY (role)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
