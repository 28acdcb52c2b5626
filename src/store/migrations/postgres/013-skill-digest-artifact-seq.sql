-- As SQLite's 013 (the bundle digest a skill run uses; each artifact's
-- place in its thread's order); no rows to backfill.
ALTER TABLE runs ADD COLUMN skill_digest TEXT;
CREATE INDEX runs_skill_digest ON runs(skill_digest);
ALTER TABLE artifacts ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX artifacts_thread_seq ON artifacts(workspace_id, thread_key, seq);
-- artifacts are ordered by seq now, not by a rowid
ALTER TABLE artifacts DROP COLUMN rowid;
