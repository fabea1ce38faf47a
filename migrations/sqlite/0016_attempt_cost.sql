-- What each attempt cost (host/src/store/history.rs, AttemptCost): the time the handler ran in
-- the sandbox (ms), the fuel it used (none when fuel metering is off), and its peak memory
-- (bytes: all linear memories and tables). Empty for attempts that ended without a result of
-- their own (rescued, cancelled, released) and for attempts recorded before this column.
-- Nullable columns without a default, so adding them rewrites no row on any backend.
ALTER TABLE async_task_attempt ADD COLUMN wall_ms INTEGER;
ALTER TABLE async_task_attempt ADD COLUMN fuel_used INTEGER;
ALTER TABLE async_task_attempt ADD COLUMN peak_memory INTEGER;
