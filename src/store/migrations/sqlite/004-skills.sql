-- Skills uploaded to a workspace: one row per version (bundle digest). The
-- files live in STATE/skills/sha256-<hex>/; bundled skills are not rows.
-- state: uploaded (testable) | promoted (runnable by agents; one per name).
CREATE TABLE skills (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    digest TEXT NOT NULL,               -- "sha256:<hex>" of the bundle's manifest of files
    manifest TEXT NOT NULL,             -- skill.json as uploaded (JSON)
    state TEXT NOT NULL,
    uploaded_by TEXT NOT NULL,
    created_at TEXT NOT NULL,
    promoted_by TEXT,
    promoted_at TEXT,
    UNIQUE (workspace_id, name, digest)
);
CREATE INDEX skills_ws ON skills(workspace_id, name, seq);
