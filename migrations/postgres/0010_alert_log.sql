-- The alert log: every alert and drill a host sent, through which channels with what outcome
-- (host/src/store/alerts.rs). event: firing, repeat, resolved or drill; alert: the alert's key
-- (dead_letters:mail, database, ...); channels: a JSON array of {channel, kind, ok, error}.
CREATE TABLE spool_alert (
    id        BIGSERIAL PRIMARY KEY,
    event     TEXT   NOT NULL,
    alert     TEXT   NOT NULL,
    task_type TEXT,
    value     BIGINT NOT NULL DEFAULT 0,
    message   TEXT   NOT NULL,
    channels  TEXT   NOT NULL DEFAULT '[]',
    host_id   TEXT   NOT NULL,
    since     BIGINT NOT NULL,
    sent_at   BIGINT NOT NULL
);

-- The latest row of each alert (open alerts), and the latest drill.
CREATE INDEX spool_alert_by_alert ON spool_alert (alert, id);

-- Dead letters by the time they failed: the alert rules count a type's dead letters within a
-- window. Partial, so only failed rows (status 3) are in it.
CREATE INDEX async_task_failed_at ON async_task (finished_at) WHERE status = 3;
