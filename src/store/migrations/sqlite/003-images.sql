-- The runtime a run asked for: NULL for the host's, else "sha256:<hex>".
ALTER TABLE runs ADD COLUMN image TEXT;
