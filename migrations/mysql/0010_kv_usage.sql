-- What each task type's key-value store holds: keys and bytes (keys and values, as stored),
-- kept with every write by the triggers below, so checking a type's caps before a write reads
-- one row instead of summing the type's whole store.
CREATE TABLE IF NOT EXISTS task_kv_usage (
    task_type VARCHAR(64) NOT NULL PRIMARY KEY,
    kv_keys   BIGINT      NOT NULL,
    kv_bytes  BIGINT      NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO task_kv_usage (task_type, kv_keys, kv_bytes)
    SELECT task_type, COUNT(*), CAST(COALESCE(SUM(LENGTH(kv_key) + LENGTH(kv_value)), 0) AS SIGNED)
    FROM task_kv GROUP BY task_type
    ON DUPLICATE KEY UPDATE kv_keys = VALUES(kv_keys), kv_bytes = VALUES(kv_bytes);

DROP TRIGGER IF EXISTS task_kv_usage_insert;
CREATE TRIGGER task_kv_usage_insert AFTER INSERT ON task_kv FOR EACH ROW
    INSERT INTO task_kv_usage (task_type, kv_keys, kv_bytes)
        VALUES (NEW.task_type, 1, LENGTH(NEW.kv_key) + LENGTH(NEW.kv_value))
        ON DUPLICATE KEY UPDATE kv_keys = kv_keys + 1, kv_bytes = kv_bytes + VALUES(kv_bytes);

DROP TRIGGER IF EXISTS task_kv_usage_update;
CREATE TRIGGER task_kv_usage_update AFTER UPDATE ON task_kv FOR EACH ROW
    UPDATE task_kv_usage SET kv_bytes = kv_bytes
        + LENGTH(NEW.kv_key) + LENGTH(NEW.kv_value) - LENGTH(OLD.kv_key) - LENGTH(OLD.kv_value)
    WHERE task_type = NEW.task_type;

DROP TRIGGER IF EXISTS task_kv_usage_delete;
CREATE TRIGGER task_kv_usage_delete AFTER DELETE ON task_kv FOR EACH ROW
    UPDATE task_kv_usage SET kv_keys = kv_keys - 1,
        kv_bytes = kv_bytes - LENGTH(OLD.kv_key) - LENGTH(OLD.kv_value)
    WHERE task_type = OLD.task_type;
