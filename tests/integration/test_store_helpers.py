"""The suite's own tricks behind a service's back (service_util.Service:
sql, fail_inserts/drop_trigger, columns, write_untyped) do what they say on
the store the suite runs on (AIRLOCK_TEST_STORE): the tests that use them to
inject a failure or corrupt a row would otherwise pass for the wrong reason.
No service is started: `airlock admin bootstrap` makes the schema."""
import pytest

from service_util import Service


@pytest.fixture
def svc(tmp_path):
    return Service(tmp_path / "state")


def test_sql_reads_and_writes_with_placeholders(svc):
    [(n,)] = svc.sql("SELECT COUNT(*) FROM workspaces")
    assert n >= 1
    svc.sql("CREATE TABLE scratch (kind TEXT, note TEXT)")
    svc.sql("INSERT INTO scratch (kind, note) VALUES (?, ?)", "a", "100% literal ?")
    assert svc.sql_count("UPDATE scratch SET note = ? WHERE kind = ?", "b", "a") == 1
    assert svc.sql("SELECT kind, note FROM scratch WHERE note LIKE '%'") == [("a", "b")]


def test_fail_inserts_refuses_the_rows_it_names_until_dropped(svc):
    svc.sql("CREATE TABLE scratch (kind TEXT)")
    svc.fail_inserts("scratch", "no_bad", when="NEW.kind = 'bad'", message="scratch refuses it")
    svc.sql("INSERT INTO scratch (kind) VALUES (?)", "good")
    with pytest.raises(Exception, match="scratch refuses it"):
        svc.sql("INSERT INTO scratch (kind) VALUES (?)", "bad")
    svc.drop_trigger("no_bad")
    svc.sql("INSERT INTO scratch (kind) VALUES (?)", "bad")
    assert sorted(svc.sql("SELECT kind FROM scratch")) == [("bad",), ("good",)]
    # without WHEN: every row, on a table of the real schema
    svc.fail_inserts("audit_events", "no_audit", message="audit table refuses writes")
    with pytest.raises(Exception, match="audit table refuses writes"):
        svc.sql("INSERT INTO audit_events (workspace_id, seq, org_id, kind, data, created_at, prev_hash, hash) "
                "VALUES ('ws_x', 1, 'org_x', 'k', '{}', 't', 'p', 'h')")
    svc.drop_trigger("no_audit")
    assert svc.sql_count("INSERT INTO audit_events (workspace_id, seq, org_id, kind, data, created_at, prev_hash, "
                         "hash) VALUES ('ws_x', 1, 'org_x', 'k', '{}', 't', 'p', 'h')") == 1


def test_columns_names_a_tables_columns_in_order(svc):
    cols = svc.columns("audit_events")
    assert cols[:2] == ["workspace_id", "seq"] and {"data", "hash", "prev_hash"} <= set(cols), cols
    assert svc.columns("no_such_table") == []


def test_write_untyped_stores_text_in_a_number_column(svc):
    [(ws,)] = svc.sql("SELECT id FROM workspaces LIMIT 1")
    assert svc.write_untyped("workspaces", "max_pids", "lots", "id = ?", ws) == 1
    assert svc.sql("SELECT max_pids FROM workspaces WHERE id = ?", ws) == [("lots",)]


def test_stored_bytes_reaches_the_store(svc):
    """A value written into the store is found by stored_bytes, short (within a
    page) or long (across SQLite's overflow pages, compressed out of line by
    PostgreSQL): what a test that asserts "stored nowhere" relies on."""
    svc.sql("CREATE TABLE scratch (note TEXT)")
    short, long = "needle-0123456789abcdef", "haystack-" + "fedcba9876543210" * 400
    svc.sql("INSERT INTO scratch (note) VALUES (?)", short)
    svc.sql("INSERT INTO scratch (note) VALUES (?)", long)
    have = [w for w, data in svc.stored_bytes() if short.encode() in data]
    assert have, "a row of the store is not in stored_bytes"
    # and in the store's own files, not only in what the rows read back as
    assert [w for w in have if not w.startswith("store table")], have
    assert [w for w, data in svc.stored_bytes() if long.encode() in data], "a long value is not in stored_bytes"
    assert not [w for w, data in svc.stored_bytes() if b"never-written-" + b"x" * 8 in data]


def test_fail_inserts_refuses_the_services_own_writes(svc):
    """The trigger meets airlock's own INSERT (its statements, its transactions),
    not only ours: `airlock admin org create` fails with the message, then works."""
    svc.fail_inserts("orgs", "no_orgs", when="NEW.name = 'refused-org'", message="orgs refuse this one")
    proc = svc.admin_run("org", "create", "refused-org")
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert proc.returncode != 0 and "orgs refuse this one" in out, out
    assert svc.sql("SELECT COUNT(*) FROM orgs WHERE name = ?", "refused-org") == [(0,)]
    svc.admin("org", "create", "another-org")
    svc.drop_trigger("no_orgs")
    svc.admin("org", "create", "refused-org")
    assert svc.sql("SELECT COUNT(*) FROM orgs WHERE name = ?", "refused-org") == [(1,)]
