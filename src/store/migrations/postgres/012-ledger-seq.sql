-- As SQLite's 012: the ledger's order is a column of its own, seq (here
-- the identity column 001 named rowid after SQLite's).
ALTER TABLE ledger RENAME COLUMN rowid TO seq;
