-- Connected folders (issue 38): a directory on the service's host that an
-- operator lends a workspace, read-only, by name. The row keeps the path
-- and the directory's identity (st_dev, st_ino, as decimal text: both are
-- unsigned 64-bit) seen when it was registered: a start whose path is no
-- longer that directory is refused. GLOB (may be empty: everything) says
-- which of its files may be listed and imported.
CREATE TABLE folders (
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    glob TEXT NOT NULL,
    dev TEXT NOT NULL,
    ino TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, name)
);
