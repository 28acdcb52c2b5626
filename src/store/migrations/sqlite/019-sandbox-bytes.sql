-- What a sandbox holds on disk (STATE/sandboxes/ID: home/ and out/, in
-- bytes), set by the service after each change (a write through its API, a
-- command's tree put back), counted against its organisation's storage
-- quota beside artifacts and runs: up to 100 sandboxes of a workspace, each
-- up to the box's caps, were disk no quota saw.
ALTER TABLE sandboxes ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
