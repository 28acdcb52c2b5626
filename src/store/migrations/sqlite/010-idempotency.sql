-- Idempotency-Key of creating POSTs (docs/api.md "Idempotent requests"):
-- one row per (person, key), written in the same transaction as what the
-- request created (a run, a skill version), so that a crash never leaves
-- one without the other. request_hash is sha256 of the canonical request
-- (its route and body): the same key with another request is refused.
-- kind/resource_id name what was created; swept after expires_at.
CREATE TABLE idempotency_keys (
    person_id TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    kind TEXT NOT NULL,                 -- run | skill
    resource_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    PRIMARY KEY (person_id, key)
);
CREATE INDEX idempotency_expiry ON idempotency_keys(expires_at);
