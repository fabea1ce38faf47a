-- How many follow-ups deep a task is: 0 for a task enqueued from outside (the API, SQL, a
-- schedule), its parent's depth plus one for a follow-up a handler enqueued. The host refuses
-- a follow-up past the parent type's `[enqueue] max_depth`, so a type allowed to enqueue
-- itself cannot grow without end. A constant default adds the column without rewriting rows.
ALTER TABLE async_task ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE async_task_archive ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
