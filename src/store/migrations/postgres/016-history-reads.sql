-- What each organisation's artifacts hold, so that the storage check of
-- every run reads one row, not every artifact the organisation ever kept;
-- and, on each artifact, whether a later version of its path replaced it,
-- so that staging a thread's latest files reads those, not every version
-- the thread ever made. Both are kept by the trigger below at each insert
-- (an artifact is never deleted), whichever node or binary writes it.
-- The backfills read every artifact once: a large store may need longer
-- than a session's 30 s per statement (postgres.c), for this unit alone.
SET LOCAL statement_timeout = 0;
ALTER TABLE orgs ADD COLUMN artifact_bytes BIGINT NOT NULL DEFAULT 0;
UPDATE orgs SET artifact_bytes = s.n FROM (SELECT org_id, SUM(size) AS n FROM artifacts GROUP BY org_id) AS s
    WHERE s.org_id = orgs.id;
ALTER TABLE artifacts ADD COLUMN superseded BIGINT NOT NULL DEFAULT 0;
UPDATE artifacts SET superseded = 1 FROM (SELECT workspace_id, thread_key, path, MAX(version) AS v FROM artifacts
    GROUP BY workspace_id, thread_key, path) AS last
    WHERE last.workspace_id = artifacts.workspace_id AND last.thread_key = artifacts.thread_key
    AND last.path = artifacts.path AND artifacts.version < last.v;
CREATE INDEX artifacts_current ON artifacts(workspace_id, thread_key, superseded, seq);
-- a new version is the last one plus one (al_store_artifact_add, under the
-- thread's lock): the one it replaces is exactly that last one
CREATE FUNCTION airlock_artifact_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE artifacts SET superseded = 1 WHERE workspace_id = NEW.workspace_id AND thread_key = NEW.thread_key
        AND path = NEW.path AND version = NEW.version - 1;
    UPDATE orgs SET artifact_bytes = artifact_bytes + NEW.size WHERE id = NEW.org_id;
    RETURN NULL;
END
$$;
CREATE TRIGGER artifacts_added AFTER INSERT ON artifacts FOR EACH ROW EXECUTE FUNCTION airlock_artifact_added();
-- the same check's skill bundles, each digest once: a search of the
-- organisation's skills, not a scan of every organisation's
CREATE INDEX skills_org ON skills(org_id, digest, bytes);
