-- Nodes: every `airlock serve` on this database, with a lease it renews.
-- A node whose lease ran out is declared dead by the others (dead_at),
-- once; a node that finds itself dead never takes its runs back.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    started_at TEXT NOT NULL,
    lease_until TEXT NOT NULL,
    stopped_at TEXT,                    -- left cleanly
    dead_at TEXT,                       -- declared dead by another node
    dead_by TEXT
);
CREATE INDEX nodes_lease ON nodes(lease_until);
-- Which node's box runs a run (from its claim on), and the per-person cap
-- it was queued under, so that any node can schedule it.
ALTER TABLE runs ADD COLUMN node_id TEXT;
ALTER TABLE runs ADD COLUMN cap BIGINT NOT NULL DEFAULT 3;
ALTER TABLE runs ADD COLUMN cancel_requested BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_node ON runs(node_id, state);
-- the claim counts a person's runs claimed or active on every node
CREATE INDEX runs_person ON runs(person_id, state);
