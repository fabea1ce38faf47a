-- What each task type's key-value store holds: keys and bytes (keys and values, as stored),
-- kept with every write by the triggers below, so checking a type's caps before a write reads
-- one row instead of summing the type's whole store.
CREATE TABLE task_kv_usage (
    task_type TEXT    NOT NULL PRIMARY KEY,
    kv_keys   INTEGER NOT NULL,
    kv_bytes  INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO task_kv_usage (task_type, kv_keys, kv_bytes)
    SELECT task_type, COUNT(*),
           COALESCE(SUM(LENGTH(CAST(kv_key AS BLOB)) + LENGTH(CAST(kv_value AS BLOB))), 0)
    FROM task_kv GROUP BY task_type;

CREATE TRIGGER task_kv_usage_insert AFTER INSERT ON task_kv
BEGIN
    INSERT INTO task_kv_usage (task_type, kv_keys, kv_bytes)
        VALUES (NEW.task_type, 1,
                LENGTH(CAST(NEW.kv_key AS BLOB)) + LENGTH(CAST(NEW.kv_value AS BLOB)))
        ON CONFLICT (task_type) DO UPDATE SET kv_keys = kv_keys + 1,
            kv_bytes = kv_bytes + excluded.kv_bytes;
END;

CREATE TRIGGER task_kv_usage_update AFTER UPDATE ON task_kv
BEGIN
    UPDATE task_kv_usage SET kv_bytes = kv_bytes
        + LENGTH(CAST(NEW.kv_key AS BLOB)) + LENGTH(CAST(NEW.kv_value AS BLOB))
        - LENGTH(CAST(OLD.kv_key AS BLOB)) - LENGTH(CAST(OLD.kv_value AS BLOB))
    WHERE task_type = NEW.task_type;
END;

CREATE TRIGGER task_kv_usage_delete AFTER DELETE ON task_kv
BEGIN
    UPDATE task_kv_usage SET kv_keys = kv_keys - 1,
        kv_bytes = kv_bytes - LENGTH(CAST(OLD.kv_key AS BLOB)) - LENGTH(CAST(OLD.kv_value AS BLOB))
    WHERE task_type = OLD.task_type;
END;
