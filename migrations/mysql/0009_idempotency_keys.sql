-- Idempotency keys hold for as long as their task exists, live or archived. The live table's
-- unique key forgets a key when its task moves to the archive; this table keeps it until the
-- purge deletes the archived task (host/src/store/*/archive.rs). Every insert into async_task
-- with a key records it here, the host's and application SQL's alike (the trigger below), so an
-- insert whose key an archived task holds fails with a duplicate-key error; the host's enqueue
-- looks keys up here first and answers such a task as a duplicate of the archived one. Keys are
-- VARBINARY as in async_task: compared byte for byte.
CREATE TABLE IF NOT EXISTS async_task_key (
    task_type       VARCHAR(64)     NOT NULL,
    idempotency_key VARBINARY(1020) NOT NULL,
    task_id         BIGINT          NOT NULL,
    PRIMARY KEY (task_type, idempotency_key),
    -- The purge forgets the keys of the tasks it deletes.
    KEY async_task_key_task (task_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The keys of the tasks that exist now: live ones first, so where an archived task and a live
-- one share a key (enqueued again after the archive, before this table existed) the key names
-- the live task.
INSERT IGNORE INTO async_task_key (task_type, idempotency_key, task_id)
    SELECT task_type, idempotency_key, id FROM async_task WHERE idempotency_key IS NOT NULL;
INSERT IGNORE INTO async_task_key (task_type, idempotency_key, task_id)
    SELECT task_type, idempotency_key, id FROM async_task_archive
    WHERE idempotency_key IS NOT NULL ORDER BY id DESC;

DROP TRIGGER IF EXISTS async_task_key_taken;
CREATE TRIGGER async_task_key_taken AFTER INSERT ON async_task FOR EACH ROW
    INSERT INTO async_task_key (task_type, idempotency_key, task_id)
    SELECT NEW.task_type, NEW.idempotency_key, NEW.id FROM DUAL
    WHERE NEW.idempotency_key IS NOT NULL;
