-- The bytes a run's inputs (inline files, stdin, a skill's arguments) hold on
-- disk until its box stages them: they count against the organisation's
-- storage quota while the run waits (queued or for approval), and are
-- removed when it ends without reaching a box.
ALTER TABLE runs ADD COLUMN input_bytes INTEGER NOT NULL DEFAULT 0;
