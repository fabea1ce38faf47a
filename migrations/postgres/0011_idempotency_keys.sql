-- Idempotency keys hold for as long as their task exists, live or archived. The live table's
-- unique index forgets a key when its task moves to the archive; this table keeps it until the
-- purge deletes the archived task (host/src/store/*/archive.rs). Every insert into async_task
-- with a key records it here, the host's and application SQL's alike (the trigger below), so an
-- insert whose key an archived task holds fails with a unique violation; the host's enqueue
-- looks keys up here first and answers such a task as a duplicate of the archived one.
CREATE TABLE async_task_key (
    task_type       TEXT   NOT NULL,
    idempotency_key TEXT   NOT NULL,
    task_id         BIGINT NOT NULL,
    PRIMARY KEY (task_type, idempotency_key)
);

-- The purge forgets the keys of the tasks it deletes.
CREATE INDEX async_task_key_task ON async_task_key (task_id);

-- The keys of the tasks that exist now: live ones first, so where an archived task and a live
-- one share a key (enqueued again after the archive, before this table existed) the key names
-- the live task.
INSERT INTO async_task_key (task_type, idempotency_key, task_id)
    SELECT task_type, idempotency_key, id FROM async_task WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING;
INSERT INTO async_task_key (task_type, idempotency_key, task_id)
    SELECT task_type, idempotency_key, id FROM async_task_archive
    WHERE idempotency_key IS NOT NULL ORDER BY id DESC
    ON CONFLICT DO NOTHING;

CREATE FUNCTION spool_record_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO async_task_key (task_type, idempotency_key, task_id)
        VALUES (NEW.task_type, NEW.idempotency_key, NEW.id);
    RETURN NULL;
END
$$;

-- Rows without a key never call the function.
CREATE TRIGGER async_task_key_taken
    AFTER INSERT ON async_task
    FOR EACH ROW WHEN (NEW.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION spool_record_key();
