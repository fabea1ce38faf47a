-- Records of attempts for `spool replay` (host/src/store/records.rs, host/src/sandbox/tape.rs):
-- every host call of one attempt with the answer the guest got, as JSON, kept for the attempts
-- the type's manifest asks for (`record`, by default those that did not succeed). build: the
-- SHA-256 of the build that ran, whose bytes spool_build keeps while a record names it.
-- Bounded like the attempt history (a task's first and latest 20 attempts), purged with its
-- task.
CREATE TABLE spool_attempt_record (
    task_id     INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    build       TEXT NOT NULL,
    record      TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    truncated   INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;
CREATE INDEX spool_attempt_record_build ON spool_attempt_record (build);
