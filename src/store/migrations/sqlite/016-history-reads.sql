-- What each organisation's artifacts hold, kept with each artifact's insert
-- (an artifact is never deleted), so that the storage check of every run
-- reads one row, not every artifact the organisation ever kept.
ALTER TABLE orgs ADD COLUMN artifact_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE orgs SET artifact_bytes = (SELECT COALESCE(SUM(size), 0) FROM artifacts WHERE artifacts.org_id = orgs.id);
-- the same check's skill bundles, each digest once: a search of the
-- organisation's skills, not a scan of every organisation's
CREATE INDEX skills_org ON skills(org_id, digest, bytes);
-- An artifact a later version of its path replaced, set as that version is
-- added, so that staging a thread's latest files reads those, not every
-- version the thread ever made.
ALTER TABLE artifacts ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
UPDATE artifacts SET superseded = 1 WHERE version < (SELECT MAX(version) FROM artifacts b WHERE
    b.workspace_id = artifacts.workspace_id AND b.thread_key = artifacts.thread_key AND b.path = artifacts.path);
CREATE INDEX artifacts_current ON artifacts(workspace_id, thread_key, superseded, seq);
