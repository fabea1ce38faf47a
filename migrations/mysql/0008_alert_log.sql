-- The alert log: every alert and drill a host sent, through which channels with what outcome
-- (host/src/store/alerts.rs). event: firing, repeat, resolved or drill; alert: the alert's key
-- (dead_letters:mail, database, ...); channels: a JSON array of {channel, kind, ok, error}.
--
-- No index for the dead letters within a window here: MySQL has no partial indexes, and one on
-- (status, finished_at) would cost every completion an index update. The rule reads the failed
-- rows through the listing index (status, task_type, id) instead.
CREATE TABLE IF NOT EXISTS spool_alert (
    id        BIGINT       NOT NULL AUTO_INCREMENT,
    event     VARCHAR(16)  NOT NULL,
    alert     VARCHAR(191) NOT NULL,
    task_type VARCHAR(64),
    value     BIGINT       NOT NULL DEFAULT 0,
    message   TEXT         NOT NULL,
    channels  TEXT         NOT NULL,
    host_id   VARCHAR(255) NOT NULL,
    since     BIGINT       NOT NULL,
    sent_at   BIGINT       NOT NULL,
    PRIMARY KEY (id),
    -- The latest row of each alert (open alerts), and the latest drill.
    KEY spool_alert_by_alert (alert, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
