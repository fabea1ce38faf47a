-- Wake-up: hosts LISTEN on the channel spool_enqueue and claim at once when it fires, instead
-- of waiting for their poll interval. Notifications are delivered when the transaction commits,
-- and PostgreSQL folds identical notifications of one transaction into one, so a 10,000-row
-- insert is one notification.

CREATE FUNCTION spool_notify_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('spool_enqueue', '');
    RETURN NULL;
END
$$;

-- Every insert, by a host or by application SQL: once per statement, not per row.
CREATE TRIGGER async_task_enqueued
    AFTER INSERT ON async_task
    FOR EACH STATEMENT EXECUTE FUNCTION spool_notify_enqueue();

-- Every update that makes a task pending and due now: an API retry, a rescued or released
-- attempt (another host should take it at once), an application's own requeue. "Now" has a
-- second's slack for clock differences between the hosts (which write these times) and the
-- database. Completions that retry later (backoff, snooze) are not due yet and wake nobody;
-- claims and completions fail the condition before any function is called.
CREATE TRIGGER async_task_requeued
    AFTER UPDATE ON async_task
    FOR EACH ROW
    WHEN (NEW.status = 0 AND (OLD.status <> 0 OR OLD.next_run_at > NEW.next_run_at)
          AND NEW.next_run_at <= spool_now_ms() + 1000)
    EXECUTE FUNCTION spool_notify_enqueue();
