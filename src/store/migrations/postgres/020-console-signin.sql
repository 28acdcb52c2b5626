-- The web console's sign-in (issue 36). A login link is one-time and short
-- lived; a console session is a cookie good for 12 hours. Only sha256 hashes
-- of their secrets are stored (the link's token travels in a URL fragment,
-- the session's in an HttpOnly cookie), so a copy of the store signs no one
-- in. Sessions are rows here, not a node's memory, so any node of many on
-- one database accepts them, and a sign-out is seen by all at once.
CREATE TABLE login_links (
    id TEXT PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people(id),
    hash TEXT NOT NULL UNIQUE,          -- sha256 of the token
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    used_at TEXT                        -- set once, when it is redeemed
);
CREATE INDEX login_links_person ON login_links(person_id);
CREATE TABLE console_sessions (
    id TEXT PRIMARY KEY,
    person_id TEXT NOT NULL REFERENCES people(id),
    hash TEXT NOT NULL UNIQUE,          -- sha256 of the cookie's value
    link_id TEXT NOT NULL,              -- the link it was opened with
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,           -- absolute: created_at + 12 h
    revoked_at TEXT                     -- signed out
);
CREATE INDEX console_sessions_person ON console_sessions(person_id);
-- API keys gain a name (the console lists and revokes them by it) and when
-- they were last used (recorded at most once a minute per key). Keys made
-- before have the name "default".
ALTER TABLE api_keys ADD COLUMN name TEXT NOT NULL DEFAULT 'default';
ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
CREATE INDEX api_keys_person ON api_keys(person_id);
