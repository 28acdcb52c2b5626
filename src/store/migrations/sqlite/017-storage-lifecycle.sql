-- Storage has a bound and a lifecycle (issue 33).
-- An output event of a run's stream says where its bytes sit in the
-- stream (out_at, out_len: its offset and length, NULL for other events),
-- so that once the run's result holds the same bytes the event's data can
-- be dropped (data = '') and read back as a slice of the result: each byte
-- of output stored once.
ALTER TABLE run_events ADD COLUMN out_at INTEGER;
ALTER TABLE run_events ADD COLUMN out_len INTEGER;
-- What a run holds in the store (its code, inputs, result, events), counted
-- against its organisation's storage quota through orgs.run_bytes, which
-- the store moves by the same amounts (one row read per quota check).
-- The runs already stored are counted here, each column in bytes (this
-- engine's own byte length; the service counts in C from now on), their
-- events as they are (before this, each byte of output was in them twice):
-- an organisation may find itself over its quota after the upgrade, until
-- the retention sweep removes what is past its workspace's retention.
ALTER TABLE runs ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE orgs ADD COLUMN run_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET stored_bytes = COALESCE(length(CAST(code AS BLOB)), 0) + COALESCE(length(CAST(description AS BLOB)), 0) + COALESCE(length(CAST(network AS BLOB)), 0) + COALESCE(length(CAST(limits AS BLOB)), 0) + COALESCE(length(CAST(inputs AS BLOB)), 0) + COALESCE(length(CAST(result AS BLOB)), 0) + COALESCE(length(CAST(previews AS BLOB)), 0) + COALESCE(length(CAST(skipped AS BLOB)), 0) + COALESCE(length(CAST(error_message AS BLOB)), 0) + COALESCE(length(CAST(result_summary AS BLOB)), 0) +
    (SELECT COALESCE(SUM(length(CAST(data AS BLOB))), 0) FROM run_events WHERE run_events.run_id = runs.id);
UPDATE orgs SET run_bytes = (SELECT COALESCE(SUM(stored_bytes), 0) FROM runs WHERE runs.org_id = orgs.id);
-- When the retention sweep dropped the run's output and events (its row,
-- summary and audit events stay).
ALTER TABLE runs ADD COLUMN expired_at TEXT;
CREATE INDEX runs_expiry ON runs(workspace_id, finished_at) WHERE expired_at IS NULL;
-- Periodic sweeps, each claimed by one node at a time: a node sweeps when
-- it moves next_at forward from a time already past, in one statement.
CREATE TABLE sweeps (
    name TEXT PRIMARY KEY,
    next_at TEXT NOT NULL,
    node_id TEXT
);
INSERT INTO sweeps (name, next_at) VALUES ('runs', '');
