-- How many attempts of a task in a row ended in a snooze; any other outcome resets it. The
-- host turns a snooze past the type's `max_snoozes` into a failed attempt.
ALTER TABLE async_task ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;

-- The effect ledger is pruned by age, per task type (`[effects] retention`).
CREATE INDEX effect_ledger_age ON effect_ledger (task_type, recorded_at);
