-- Tenants: organisations -> workspaces -> people; API keys belong to a person.
CREATE TABLE orgs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    storage_quota_bytes INTEGER NOT NULL DEFAULT 1073741824,
    created_at TEXT NOT NULL
);
CREATE TABLE workspaces (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    max_timeout_s INTEGER NOT NULL DEFAULT 120,
    max_memory_mb INTEGER NOT NULL DEFAULT 2048,
    max_cpus_milli INTEGER NOT NULL DEFAULT 2000,
    max_pids INTEGER NOT NULL DEFAULT 1024,
    created_at TEXT NOT NULL
);
CREATE TABLE people (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    name TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people(id),
    hash TEXT NOT NULL UNIQUE,          -- sha256 of the key; the key is never stored
    prefix TEXT NOT NULL,               -- first characters, to recognise a key in a list
    created_at TEXT NOT NULL,
    revoked_at TEXT
);

-- Runs: seq orders a workspace's activity (newest first) and pages it.
CREATE TABLE runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    person_id TEXT NOT NULL,
    thread_id TEXT,
    language TEXT NOT NULL,
    code TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    network TEXT NOT NULL DEFAULT 'offline',
    limits TEXT NOT NULL,               -- JSON
    inputs TEXT NOT NULL DEFAULT '[]',  -- JSON: staged file names, artifact ids
    state TEXT NOT NULL,
    result TEXT,                        -- JSON: the box result
    previews TEXT,                      -- JSON
    skipped TEXT,                       -- JSON
    error_code TEXT,
    error_message TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT
);
CREATE INDEX runs_ws ON runs(workspace_id, seq);
CREATE INDEX runs_state ON runs(state);

-- Everything a run's event stream carried, for late joiners and replays.
CREATE TABLE run_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Artifacts: content-addressed blobs on disk, versioned per (thread, path).
-- thread_key is the thread id, or the run id for a run without a thread.
CREATE TABLE artifacts (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    thread_id TEXT,
    thread_key TEXT NOT NULL,
    run_id TEXT NOT NULL,
    path TEXT NOT NULL,
    version INTEGER NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    content_type TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (workspace_id, thread_key, path, version)
);
CREATE INDEX artifacts_run ON artifacts(run_id);
CREATE INDEX artifacts_org ON artifacts(org_id);
