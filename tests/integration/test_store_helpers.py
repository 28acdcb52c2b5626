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
