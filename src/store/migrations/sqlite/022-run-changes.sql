-- The activity streams' one look per node (issue 36, core/activity.h):
-- every workspace's runs changed since the last look, in (changed_at, seq)
-- order, whatever workspaces have streams open on the node.
CREATE INDEX runs_changed_all ON runs(changed_at, seq);
