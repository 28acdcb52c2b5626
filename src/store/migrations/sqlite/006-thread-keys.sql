-- Artifact thread keys in a form no id of one kind can share with the
-- other: "t:" and the thread id, or "r:" and the run id for a run without
-- a thread (a thread id shaped like a run id once named that run's files).
UPDATE artifacts SET thread_key = CASE WHEN thread_id IS NOT NULL THEN 't:' || thread_id ELSE 'r:' || run_id END;
