-- What each organisation's artifacts hold, so that the storage check of
-- every run reads one row, not every artifact the organisation ever kept;
-- and, on each artifact, whether a later version of its path replaced it,
-- so that staging a thread's latest files reads those, not every version
-- the thread ever made. Both are kept by the trigger below at each insert
-- (an artifact is never deleted), whichever node or binary writes it.
ALTER TABLE orgs ADD COLUMN artifact_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE orgs SET artifact_bytes = (SELECT COALESCE(SUM(size), 0) FROM artifacts WHERE artifacts.org_id = orgs.id);
ALTER TABLE artifacts ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
UPDATE artifacts SET superseded = 1 WHERE version < (SELECT MAX(version) FROM artifacts b WHERE
    b.workspace_id = artifacts.workspace_id AND b.thread_key = artifacts.thread_key AND b.path = artifacts.path);
CREATE INDEX artifacts_current ON artifacts(workspace_id, thread_key, superseded, seq);
-- a new version is the last one plus one (al_store_artifact_add, under the
-- thread's lock): the one it replaces is exactly that last one
CREATE TRIGGER artifacts_added AFTER INSERT ON artifacts BEGIN
    UPDATE artifacts SET superseded = 1 WHERE workspace_id = NEW.workspace_id AND thread_key = NEW.thread_key
        AND path = NEW.path AND version = NEW.version - 1;
    UPDATE orgs SET artifact_bytes = artifact_bytes + NEW.size WHERE id = NEW.org_id;
END;
-- the same check's skill bundles, each digest once: a search of the
-- organisation's skills, not a scan of every organisation's
CREATE INDEX skills_org ON skills(org_id, digest, bytes);
