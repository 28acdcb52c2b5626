"""`airlock serve`: tenant isolation between two organisations, every endpoint
(docs/api.md: another tenant's records are 404, lists never show them)."""
import uuid

import pytest

from service_util import assert_error, b64, service  # noqa: F401


@pytest.fixture(scope="module")
def two(service):
    """Two organisations, each with a finished run in a thread (same thread id!), an artifact and a live run."""
    a = service.new_tenant("org-a-" + uuid.uuid4().hex[:6]).client
    b = service.new_tenant("org-b-" + uuid.uuid4().hex[:6]).client
    assert a.key != b.key
    thread = "shared-" + uuid.uuid4().hex[:8]
    recs = {}
    for name, c in (("a", a), ("b", b)):
        code = f"open('/out/{name}.txt', 'w').write('secret of {name}')\nprint('{name}')"
        run = c.run(code, thread_id=thread)
        assert run["state"] == "succeeded", run
        live = c.run("import time; time.sleep(60)", wait=False)
        recs[name] = {"run": run, "art": run["artifacts"][0], "live": live}
    yield a, b, thread, recs
    for name, c in (("a", a), ("b", b)):
        c.cancel(recs[name]["live"]["id"])


def test_keys_from_admin_work(two):
    a, b, _, recs = two
    assert a.get_run(recs["a"]["run"]["id"])["id"] == recs["a"]["run"]["id"]
    assert b.get_run(recs["b"]["run"]["id"])["id"] == recs["b"]["run"]["id"]


@pytest.mark.parametrize("who", ["a", "b"])
def test_other_tenants_ids_are_404_everywhere(two, who):
    a, b, thread, recs = two
    me, other = (a, recs["b"]) if who == "a" else (b, recs["a"])
    rid, art, live = other["run"]["id"], other["art"]["id"], other["live"]["id"]
    for method, path in [("GET", f"/v1/runs/{rid}"), ("GET", f"/v1/runs/{rid}/events"),
                         ("POST", f"/v1/runs/{rid}/cancel"), ("POST", f"/v1/runs/{live}/cancel"),
                         ("GET", f"/v1/runs/{live}"), ("GET", f"/v1/runs/{live}/events"),
                         ("GET", f"/v1/artifacts/{art}"), ("GET", f"/v1/artifacts/{art}/content")]:
        status, _, doc = me.request(method, path, timeout=10)
        assert_error(status, doc, "not_found")
    # the other tenant's live run was not canceled by that attempt
    owner = b if who == "a" else a
    assert owner.get_run(live)["state"] in ("queued", "provisioning", "running")
    # referencing the other tenant's artifact in a run is refused, and nothing is staged
    status, _, doc = me.post_run("import os; print(os.listdir('/work/documents'))", artifacts=[art])
    assert status in (400, 404), (status, doc)
    assert_error(status, doc, "bad_request" if status == 400 else "not_found")


@pytest.mark.parametrize("who", ["a", "b"])
def test_lists_show_only_own_records(two, who):
    a, b, thread, recs = two
    me, mine, theirs = (a, recs["a"], recs["b"]) if who == "a" else (b, recs["b"], recs["a"])
    ids = {r["id"] for r in me.list_runs()}
    assert mine["run"]["id"] in ids and mine["live"]["id"] in ids
    assert theirs["run"]["id"] not in ids and theirs["live"]["id"] not in ids
    ids = {r["id"] for r in me.list_runs(thread_id=thread)}
    assert ids == {mine["run"]["id"]}
    arts = me.ok("GET", f"/v1/threads/{thread}/artifacts?all=true")["artifacts"]
    assert [x["id"] for x in arts] == [mine["art"]["id"]]
    arts = me.ok("GET", f"/v1/threads/{thread}/artifacts")["artifacts"]
    assert [x["id"] for x in arts] == [mine["art"]["id"]]


def test_same_thread_id_does_not_share_documents(two):
    a, b, thread, recs = two
    code = ("import os\nfor r, d, f in os.walk('/work/documents'):\n"
            "    for x in f: print(x, open(os.path.join(r, x)).read())\n")
    out_a = a.run(code, thread_id=thread)["result"]["stdout"]
    out_b = b.run(code, thread_id=thread)["result"]["stdout"]
    assert "a.txt secret of a" in out_a and "secret of b" not in out_a, out_a
    assert "b.txt secret of b" in out_b and "secret of a" not in out_b, out_b


def test_bootstrap_tenant_sees_neither(service, two):
    a, b, thread, recs = two
    ids = {r["id"] for r in service.list_runs()}
    for rec in recs.values():
        assert rec["run"]["id"] not in ids
        status, _, doc = service.get(f"/v1/artifacts/{rec['art']['id']}")
        assert_error(status, doc, "not_found")


def test_second_person_of_same_workspace(service):
    """People of one workspace share its records (the list is the workspace's activity)."""
    t = service.new_tenant("org-c-" + uuid.uuid4().hex[:6])
    _, key2 = service.new_person(t.workspace, "second")
    p2 = service.with_key(key2)
    run = t.client.run("print('from p1')", files=[{"name": "f.txt", "content_base64": b64("x")}])
    assert p2.get_run(run["id"])["result"]["stdout"] == "from p1\n"
    assert run["id"] in {r["id"] for r in p2.list_runs()}


def test_admin_list_never_shows_keys(service):
    t = service.new_tenant("org-d-" + uuid.uuid4().hex[:6])
    out = service.admin("list")
    assert t.org in out and t.workspace in out
    assert t.key not in out and service.key not in out, "admin list shows an API key"
    # keys are stored hashed: no key appears in plain text in the state directory, nor in the store
    for p, data in service.stored_bytes():
        if p.endswith(".log"):
            continue
        assert t.key.encode() not in data, f"API key stored in plain text in {p}"
