-- As SQLite's 011 (a run list's summary columns); no rows to backfill.
ALTER TABLE runs ADD COLUMN result_summary TEXT;
ALTER TABLE runs ADD COLUMN preview_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN skipped_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN skill_name TEXT;
ALTER TABLE runs ADD COLUMN skill_version TEXT;
