-- What the console shows of a run and how it hears of changes (issue 36).
-- via: the interface that asked (rest, mcp, piston, e2b), a column of its
-- own so that GET /v1/runs filters and lists it without loading inputs
-- (where it was kept as JSON; old rows are read from there once, here).
-- changed_at: when the run was made or last changed state, so that the
-- workspace's activity stream (GET /v1/events) reads what changed since
-- its last look with one indexed query, on any node of a shared store.
ALTER TABLE runs ADD COLUMN via TEXT NOT NULL DEFAULT 'rest';
ALTER TABLE runs ADD COLUMN changed_at TEXT;
UPDATE runs SET via = 'mcp' WHERE inputs LIKE '%"via":"mcp"%';
UPDATE runs SET via = 'piston' WHERE inputs LIKE '%"via":"piston"%';
UPDATE runs SET via = 'e2b' WHERE inputs LIKE '%"via":"e2b"%';
UPDATE runs SET changed_at = COALESCE(finished_at, started_at, created_at);
CREATE INDEX runs_changed ON runs(workspace_id, changed_at);
CREATE INDEX runs_ws_person ON runs(workspace_id, person_id, seq);
-- the console's Threads: a workspace's threads, grouped from its runs
CREATE INDEX runs_ws_thread ON runs(workspace_id, thread_id, seq);
-- the console's Usage: a workspace's runs and charges of the last 30 days, by day
CREATE INDEX runs_ws_created ON runs(workspace_id, created_at);
CREATE INDEX ledger_ws_created ON ledger(workspace_id, created_at);
