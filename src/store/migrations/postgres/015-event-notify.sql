-- Every new event of a run tells the other nodes (their followers of that
-- run wake and read it), sent by the server at the insert's commit: no
-- round trip of the node's own for it (SQLite has one node: none).
CREATE FUNCTION airlock_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('airlock_events', NEW.run_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER run_events_notify AFTER INSERT ON run_events FOR EACH ROW EXECUTE FUNCTION airlock_event_notify();
