-- The skill digest a run stages, as a column: which runs still need a
-- bundle is asked by equality, in SQL that every backend speaks (it was
-- json_extract over inputs). NULL for a run that is not a skill's.
ALTER TABLE runs ADD COLUMN skill_digest TEXT;
UPDATE runs SET skill_digest = json_extract(inputs, '$.skill.digest') WHERE json_valid(inputs);
CREATE INDEX runs_skill_digest ON runs(skill_digest) WHERE skill_digest IS NOT NULL;
-- The order in which a thread's artifacts were ingested, 1, 2, ... per
-- thread key: staging takes the thread's newest state first, which was
-- SQLite's rowid order. Numbered with the version, under the thread's lock.
ALTER TABLE artifacts ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE artifacts SET seq = rowid;
CREATE INDEX artifacts_thread_seq ON artifacts(workspace_id, thread_key, seq);
