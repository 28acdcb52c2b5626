-- Roles: admins change settings and approve; approvers approve; members run.
ALTER TABLE people ADD COLUMN role TEXT NOT NULL DEFAULT 'member';

-- Per-workspace settings (JSON over the defaults) and write-only secrets.
CREATE TABLE workspace_settings (
    workspace_id TEXT PRIMARY KEY REFERENCES workspaces(id),
    settings TEXT NOT NULL DEFAULT '{}',
    secrets TEXT NOT NULL DEFAULT '{}',
    updated_at TEXT
);

-- Credits: a balance per organisation and a ledger of every change.
-- (run_id, kind) is unique: a run is charged once and refunded once, even
-- across a crash and restart.
ALTER TABLE orgs ADD COLUMN credit_balance INTEGER NOT NULL DEFAULT 0;
CREATE TABLE ledger (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    workspace_id TEXT,
    run_id TEXT,
    kind TEXT NOT NULL,                 -- grant | charge | refund
    amount INTEGER NOT NULL,            -- signed: charges are negative
    balance_after INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (run_id, kind)
);
CREATE INDEX ledger_org ON ledger(org_id, created_at);
INSERT INTO ledger (id, org_id, kind, amount, balance_after, created_at)
    SELECT 'led_' || lower(hex(randomblob(10))), id, 'grant', 1000, 1000, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM orgs;
UPDATE orgs SET credit_balance = 1000;

ALTER TABLE runs ADD COLUMN price INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN redactions INTEGER NOT NULL DEFAULT 0;

-- Approvals: what was shown (card, hash), and the decision.
CREATE TABLE approval_requests (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    hash TEXT NOT NULL,
    card TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    decision TEXT,                      -- approved | denied | expired
    decided_by TEXT,
    decided_at TEXT,
    reason TEXT
);
CREATE INDEX approvals_open ON approval_requests(decision, expires_at);

-- Audit: one hash chain per workspace; each event holds its predecessor's hash.
CREATE TABLE audit_events (
    workspace_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    org_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    person_id TEXT,
    run_id TEXT,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);
CREATE INDEX audit_run ON audit_events(run_id);

CREATE TABLE analytics (
    run_id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    language TEXT NOT NULL,
    state TEXT NOT NULL,
    exit_code INTEGER,
    duration_ms INTEGER,
    created_at TEXT NOT NULL
);
