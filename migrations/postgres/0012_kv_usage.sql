-- What each task type's key-value store holds: keys and bytes (keys and values, as stored),
-- kept with every write by the trigger below, so checking a type's caps before a write reads
-- one row instead of summing the type's whole store.
CREATE TABLE task_kv_usage (
    task_type TEXT   NOT NULL PRIMARY KEY,
    kv_keys   BIGINT NOT NULL,
    kv_bytes  BIGINT NOT NULL
);

INSERT INTO task_kv_usage (task_type, kv_keys, kv_bytes)
    SELECT task_type, COUNT(*), COALESCE(SUM(octet_length(kv_key) + octet_length(kv_value)), 0)
    FROM task_kv GROUP BY task_type;

CREATE FUNCTION spool_count_kv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_kv_usage (task_type, kv_keys, kv_bytes)
            VALUES (NEW.task_type, 1, octet_length(NEW.kv_key) + octet_length(NEW.kv_value))
            ON CONFLICT (task_type) DO UPDATE SET kv_keys = task_kv_usage.kv_keys + 1,
                kv_bytes = task_kv_usage.kv_bytes + EXCLUDED.kv_bytes;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE task_kv_usage SET kv_bytes = kv_bytes
            + octet_length(NEW.kv_key) + octet_length(NEW.kv_value)
            - octet_length(OLD.kv_key) - octet_length(OLD.kv_value)
        WHERE task_type = NEW.task_type;
    ELSE
        UPDATE task_kv_usage SET kv_keys = kv_keys - 1,
            kv_bytes = kv_bytes - octet_length(OLD.kv_key) - octet_length(OLD.kv_value)
        WHERE task_type = OLD.task_type;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER task_kv_usage_kept
    AFTER INSERT OR UPDATE OR DELETE ON task_kv
    FOR EACH ROW EXECUTE FUNCTION spool_count_kv();
