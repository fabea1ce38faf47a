-- Fencing: every claim increments `attempts`, which nothing ever resets (an API retry resets
-- retry_count, not this). A completion names the attempt it belongs to, so a late result of an
-- old attempt can never land on a newer claim of the same task.
ALTER TABLE async_task ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;

-- Host-wide values the hosts sharing this database agree on (for example the key that
-- authenticates compiled-code cache artifacts). Written once, read many times.
CREATE TABLE spool_meta (
    name  TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- Leadership: one row per role (maintenance); the owner holds it until expires_at and renews
-- it while alive. Another host takes over once the lease has expired.
CREATE TABLE spool_leader (
    role       TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
