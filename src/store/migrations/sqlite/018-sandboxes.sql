-- E2B-compatible sandboxes (issue 35): a sandbox is a workspace's kept
-- directory (STATE/sandboxes/ID) and the settings its runs get, not a
-- process. The row says whose it is, which key made it (a revoked key
-- ends the sandbox plane's access), the hash of its access token (the
-- token itself is shown once), and until when it lives.
CREATE TABLE sandboxes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    token_hash TEXT NOT NULL,           -- sha256 of the access token
    template_id TEXT NOT NULL,
    image TEXT NOT NULL,
    network TEXT NOT NULL,
    metadata TEXT NOT NULL,             -- JSON object of strings
    env_vars TEXT NOT NULL,             -- JSON object of strings
    started_at TEXT NOT NULL,
    end_at TEXT NOT NULL,
    state TEXT NOT NULL                 -- running | paused
);
CREATE INDEX sandboxes_ws ON sandboxes(workspace_id, seq);
CREATE INDEX sandboxes_end ON sandboxes(end_at);
-- the reaper of sandboxes past their end, claimed by one node at a time
INSERT INTO sweeps (name, next_at) VALUES ('sandboxes', '');
