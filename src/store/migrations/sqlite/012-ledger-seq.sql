-- The ledger is read the last written first (GET /v1/usage, airlock admin
-- credits show): that order becomes a column of its own, as runs.seq is,
-- instead of SQLite's rowid, which no other backend has. The rows keep
-- their order: seq is the rowid they had.
CREATE TABLE ledger_new (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    org_id TEXT NOT NULL,
    workspace_id TEXT,
    run_id TEXT,
    kind TEXT NOT NULL,                 -- grant | charge | refund
    amount INTEGER NOT NULL,            -- signed: charges are negative
    balance_after INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (run_id, kind)
);
INSERT INTO ledger_new (seq, id, org_id, workspace_id, run_id, kind, amount, balance_after, created_at)
    SELECT rowid, id, org_id, workspace_id, run_id, kind, amount, balance_after, created_at FROM ledger ORDER BY rowid;
DROP TABLE ledger;
ALTER TABLE ledger_new RENAME TO ledger;
CREATE INDEX ledger_org ON ledger(org_id, created_at);
