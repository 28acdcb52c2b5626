-- Storage has a bound and a lifecycle (issue 33).
-- An output event of a run's stream says where its bytes sit in the
-- stream (out_at, out_len: its offset and length, NULL for other events),
-- so that once the run's result holds the same bytes the event's data can
-- be dropped (data = '') and read back as a slice of the result: each byte
-- of output stored once.
ALTER TABLE run_events ADD COLUMN out_at BIGINT;
ALTER TABLE run_events ADD COLUMN out_len BIGINT;
-- What a run holds in the store (its code, inputs, result, events), counted
-- against its organisation's storage quota through orgs.run_bytes, which
-- the store moves by the same amounts (one row read per quota check).
-- Runs stored before this count nothing: their bytes are unknown to a
-- store without a byte-length function both engines share.
ALTER TABLE runs ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orgs ADD COLUMN run_bytes BIGINT NOT NULL DEFAULT 0;
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
