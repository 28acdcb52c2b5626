-- The unpacked size of each stored skill version, so that skill bundles
-- count against their organisation's storage quota like artifacts do.
ALTER TABLE skills ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
