-- Which API key asked for a run (issue 36: the console's Activity says
-- "who or which agent": a person's keys are named, e.g. "ci-agent",
-- "support-bot"). NULL: a person's console session asked, or the run was
-- made before this column. The key's name is read with the run from
-- api_keys (a revoked key keeps its row and its name).
ALTER TABLE runs ADD COLUMN key_id TEXT;
-- GET /v1/runs?key_id=K, newest first
CREATE INDEX runs_ws_key ON runs(workspace_id, key_id, seq);
