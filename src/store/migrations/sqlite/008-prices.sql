-- Prices are the operator's (airlock admin price set), not a workspace
-- admin's: a workspace's price per run lives beside its other operator-set
-- limits, out of the settings its admins write. NULL: the service default.
ALTER TABLE workspaces ADD COLUMN price_per_run INTEGER;
-- a price a workspace admin set for their own workspace is not carried over
UPDATE workspace_settings SET settings = json_remove(settings, '$.price_per_run')
    WHERE json_valid(settings) AND json_type(settings) = 'object';
