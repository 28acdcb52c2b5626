-- A thread's own environment (issue 38): the packages its runs asked for,
-- per package manager ('python', 'node'), as the union of every run's
-- specs (a later spec of one name replacing the earlier), and the layer
-- they were last installed into with what it resolved to (name, version,
-- digest per package: the installer's report). Written when a run of the
-- thread ends with its install done; read when a run of the thread starts,
-- so every later run mounts the same layer. A thread is a workspace's: the
-- key is the workspace's, the organisation kept for its reports.
CREATE TABLE thread_packages (
    org_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    lang TEXT NOT NULL,
    specs TEXT NOT NULL,
    layer TEXT NOT NULL,
    resolved TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, thread_id, lang)
);
