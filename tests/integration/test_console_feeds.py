"""`airlock serve`: what the web console reads that the API had not given
(issue 36, console_contract.md "Reading the workspace"): who asked for a run
(the person and which of their keys: "who or which agent"), through what and
what it cost; GET /v1/runs's person_id, via and key_id filters;
the workspace's activity stream (GET /v1/events); persons; threads;
sandboxes; usage by day; the audit chain's verification and its export."""
import http.client
import json
import queue
import socket
import threading
import time

import pytest

from conftest import need
from service_util import TERMINAL, assert_error, service  # noqa: F401


def tenant_with_people(service, name):
    """A new organisation and workspace with an admin, an approver and a
    member: (workspace id, org id, {role: (person id, client)})."""
    org = service.admin_id("org", "create", name)
    ws = service.admin_id("workspace", "create", "--org", org, name + "-ws")
    people = {}
    for role in ("admin", "approver", "member"):
        pid = service.admin_id("person", "create", "--workspace", ws, f"{name}-{role}", "--role", role)
        out = service.admin("key", "create", "--person", pid)
        key = next(w for w in out.split() if w.startswith("al_"))
        people[role] = (pid, service.with_key(key))
    return ws, org, people


class Activity:
    """GET /v1/events read on a thread: the events into a queue."""

    def __init__(self, svc, key):
        self.conn = http.client.HTTPConnection(svc.host, svc.port, timeout=60)
        self.conn.request("GET", "/v1/events", headers={"Authorization": f"Bearer {key}",
                                                         "Accept": "text/event-stream"})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.q = queue.Queue()
        self.comments = 0
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = json.loads(self.resp.read())

    def _read(self):
        kind, data = None, []
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                line = line.decode().rstrip("\r\n")
                if line.startswith(":"):
                    self.comments += 1
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and data:
                    self.q.put((kind, json.loads("\n".join(data))))
                    kind, data = None, []
        except (OSError, ValueError, AttributeError):  # closed under the reader
            pass
        self.q.put(None)

    def until(self, pred, timeout=30.0):
        """Events until PRED(kind, data) holds: the list read (the last one PRED's)."""
        seen, deadline = [], time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no such event in {timeout} s; read {seen!r}"
            try:
                ev = self.q.get(timeout=left)
            except queue.Empty:
                continue
            assert ev is not None, f"the stream ended; read {seen!r}"
            seen.append(ev)
            if pred(*ev):
                return seen

    def close(self):
        # shut the socket down (a close alone leaves it open while the
        # reader's file still holds it): the service sees the client go
        if self.conn.sock is not None:
            try:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conn.close()


def test_run_says_who_asked_through_what_and_its_credits(service):
    t, _, people = tenant_with_people(service, "who")
    mid, member = people["member"]
    run = member.run("print('hi')")
    keys = member.ok("GET", "/v1/keys")["keys"]
    assert [k["name"] for k in keys] == ["default"]
    assert run["requested_by"] == {"id": mid, "name": "who-member", "role": "member",
                                   "key": {"id": keys[0]["id"], "name": "default"}}
    assert run["via"] == "rest"
    assert isinstance(run["credits"], int) and run["credits"] >= 0
    listed = member.list_runs()
    assert [r["id"] for r in listed] == [run["id"]]
    assert listed[0]["requested_by"] == run["requested_by"] and listed[0]["via"] == "rest"
    assert listed[0]["credits"] == member.get_run(run["id"])["credits"]


def named_key(client, name):
    """A new key of CLIENT's person named NAME (POST /v1/keys): (its id, a client with it)."""
    doc = client.ok("POST", "/v1/keys", json={"name": name}, want=201)
    return doc["key"]["id"], client.with_key(doc["secret"])


def test_each_run_says_which_of_the_persons_keys_asked(service):
    """Who or which agent (issue 36): a person's agents are told apart by
    their keys' names; a run carries the key that asked, whatever the
    interface (REST, Piston's URL key, an E2B sandbox's command: the key
    that made the sandbox), none when the console's session asked; the
    list filters by key, and another workspace's key id finds nothing."""
    from test_console_auth import sign_in
    ws, _, people = tenant_with_people(service, "agents")
    mid, member = people["member"]
    ci_id, ci = named_key(member, "ci-agent")
    bot_id, bot = named_key(member, "support-bot")
    by_ci = ci.run("print('ci')")
    by_bot = bot.run("print('bot')")
    assert by_ci["requested_by"] == {"id": mid, "name": "agents-member", "role": "member",
                                     "key": {"id": ci_id, "name": "ci-agent"}}
    assert by_bot["requested_by"]["key"] == {"id": bot_id, "name": "support-bot"}
    # Piston's key is in its URL
    piston = bot.ok("POST", f"/piston/{bot.key}/api/v2/execute",
                    json={"language": "python", "version": "*", "files": [{"content": "print(3)"}]})
    assert piston["run"]["code"] == 0
    # an E2B sandbox's command: the key that made the sandbox asked
    sid, token = e2b_create(ci)
    status, _, _ = service.request("POST", "/execute", key=None, json={"code": "print(4)"}, timeout=60, headers={
        "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "X-Access-Token": token})
    assert status == 200
    # the console's session: the person, no key
    console, _, _ = sign_in(service, mid)
    by_session = console.ok("POST", "/v1/runs", json={"language": "python", "code": "print(5)"}, want=201)
    assert by_session["requested_by"]["id"] == mid and by_session["requested_by"]["key"] is None
    listed = {r["id"]: r for r in member.list_runs()}
    assert len(listed) == 5
    assert listed[by_ci["id"]]["requested_by"]["key"] == {"id": ci_id, "name": "ci-agent"}
    assert listed[by_session["id"]]["requested_by"]["key"] is None
    assert member.get_run(by_session["id"])["requested_by"]["key"] is None
    e2b = [r for r in listed.values() if r["via"] == "e2b"]
    assert len(e2b) == 1 and e2b[0]["requested_by"]["key"] == {"id": ci_id, "name": "ci-agent"}
    # the filter, alone and with another
    assert {r["id"] for r in member.list_runs(key_id=ci_id)} == {by_ci["id"], e2b[0]["id"]}
    on_bot = member.list_runs(key_id=bot_id)
    assert [r["via"] for r in on_bot] == ["piston", "rest"] and on_bot[1]["id"] == by_bot["id"]
    assert [r["via"] for r in member.list_runs(key_id=bot_id, via="piston")] == ["piston"]
    # a revoked key's runs keep its name
    console.ok("DELETE", f"/v1/keys/{bot_id}")
    assert member.get_run(by_bot["id"])["requested_by"]["key"] == {"id": bot_id, "name": "support-bot"}
    # another workspace's key matches nothing here; its own runs are its own
    other = service.new_tenant("agents-other").client
    okey = other.ok("GET", "/v1/keys")["keys"][0]["id"]
    other.run("print(6)")
    assert member.list_runs(key_id=okey) == []
    assert [r["requested_by"]["key"]["id"] for r in other.list_runs(key_id=okey)] == [okey]
    assert other.list_runs(key_id=ci_id) == []
    for bad in ("", "k" * 40):
        status, _, doc = member.get("/v1/runs", query={"key_id": bad})
        assert_error(status, doc, "bad_request", 400)
        assert "key_id" in doc["error"]["message"]


def test_credits_are_what_the_ledger_charged(service):
    t, _, people = tenant_with_people(service, "price")
    _, admin = people["admin"]
    ws, org, people = t, _, people
    service.admin("price", "set", "--workspace", ws, "3")
    run = admin.run("print(1)")
    assert run["state"] == "succeeded" and run["credits"] == 3
    assert admin.get_run(run["id"])["credits"] == 3
    assert [r["credits"] for r in admin.list_runs()] == [3]
    # a run of a workspace that charges nothing costs 0
    service.admin("price", "set", "--workspace", ws, "0")
    free = admin.run("print(2)")
    assert free["credits"] == 0


def test_runs_filter_by_person_and_via(service):
    t, _, people = tenant_with_people(service, "filt")
    mid, member = people["member"]
    aid, admin = people["admin"]
    mine = member.run("print(1)")
    theirs = admin.run("print(2)")
    piston = admin.ok("POST", f"/piston/{admin.key}/api/v2/execute",
                      json={"language": "python", "version": "*", "files": [{"content": "print(3)"}]})
    assert piston["run"]["code"] == 0
    by_member = admin.list_runs(person_id=mid)
    assert [r["id"] for r in by_member] == [mine["id"]]
    by_admin = admin.list_runs(person_id=aid)
    assert theirs["id"] in [r["id"] for r in by_admin] and mine["id"] not in [r["id"] for r in by_admin]
    rest = admin.list_runs(via="rest")
    assert {r["id"] for r in rest} == {mine["id"], theirs["id"]}
    pist = admin.list_runs(via="piston")
    assert len(pist) == 1 and pist[0]["via"] == "piston" and pist[0]["requested_by"]["id"] == aid
    assert admin.list_runs(via="mcp") == []
    # both filters together, and with state
    assert [r["id"] for r in admin.list_runs(person_id=aid, via="piston", state="succeeded")] == [pist[0]["id"]]
    # another workspace's person matches nothing
    other = service.new_tenant("filt-other")
    assert admin.list_runs(person_id=other.person) == []
    status, _, doc = admin.get("/v1/runs", query={"via": "smtp"})
    assert_error(status, doc, "bad_request", 400)
    assert "rest, mcp, piston, e2b" in doc["error"]["message"]
    status, _, doc = admin.get("/v1/runs", query={"person_id": "x" * 200})
    assert_error(status, doc, "bad_request", 400)


def test_events_see_another_requests_run_to_its_end_and_no_other_workspace(service):
    t, _, people = tenant_with_people(service, "live")
    _, admin = people["admin"]
    mid, member = people["member"]
    other = service.new_tenant("live-other")
    watch = Activity(service, admin.key)
    assert watch.status == 200
    try:
        # a run of another workspace first: it must never appear
        foreign = other.client.run("print('not yours')", wait=False)
        run = member.run("import time; time.sleep(1); print('done')", wait=False)
        seen = watch.until(lambda k, d: d.get("id") == run["id"] and d["state"] in TERMINAL, timeout=60)
        ids = {d["id"] for _, d in seen}
        assert foreign["id"] not in ids
        mine = [d for k, d in seen if d["id"] == run["id"]]
        assert all(k == "run" for k, _ in seen)
        states = [d["state"] for d in mine]
        # each change once, in order, through to its end
        assert states[-1] == "succeeded", states
        assert len(states) == len(set(states)), states
        assert "running" in states or "provisioning" in states, states
        last = mine[-1]
        assert last["requested_by"]["id"] == mid and last["via"] == "rest" and last["summary"] is True
        assert last["result"]["exit_code"] == 0
        # what the list says is what the stream said last
        listed = {r["id"]: r for r in admin.list_runs()}[run["id"]]
        assert listed == last
        # still nothing of the other workspace, after its run ended too
        other.client.wait_state(foreign["id"], TERMINAL)
        run2 = admin.run("print(2)", wait=False)
        seen = watch.until(lambda k, d: d.get("id") == run2["id"] and d["state"] in TERMINAL, timeout=60)
        assert foreign["id"] not in {d["id"] for _, d in seen}
    finally:
        watch.close()


def test_events_are_capped_per_person(service):
    t, _, people = tenant_with_people(service, "cap")
    _, member = people["member"]
    streams = [Activity(service, member.key) for _ in range(8)]
    try:
        assert [s.status for s in streams] == [200] * 8
        extra = Activity(service, member.key)
        assert extra.status == 429 and extra.body["error"]["code"] == "too_many_requests"
        # another person of the workspace has their own
        other = Activity(service, people["approver"][1].key)
        assert other.status == 200
        other.close()
        streams.pop().close()
        deadline = time.monotonic() + 10
        while True:
            again = Activity(service, member.key)
            if again.status == 200:
                again.close()
                break
            assert time.monotonic() < deadline, "a closed stream's place was not given back"
            time.sleep(0.3)
    finally:
        for s in streams:
            s.close()
    status, _, doc = member.get("/v1/events", query={"since": "x"})
    assert_error(status, doc, "bad_request", 400)


def store_statements(svc):
    status, _, text = svc.request("GET", "/metrics", key=None)
    assert status == 200
    text = text if isinstance(text, str) else text.decode()
    return int(next(line.split()[1] for line in text.splitlines()
                    if line.startswith("airlock_store_statements_total ")))


def test_open_streams_share_one_look_at_the_store(service):
    """Streams of many workspaces cost the store one look a tick for the
    node, not one each: with 8 streams in 8 workspaces, idle, the store's
    statements a second grow by about one (a look a second), where a look
    per stream grew them by eight."""
    tenants = [service.new_tenant(f"look{i}") for i in range(8)]
    time.sleep(1)
    before = store_statements(service)
    time.sleep(4)
    idle = store_statements(service) - before
    streams = [Activity(service, t.key) for t in tenants]
    try:
        assert [s.status for s in streams] == [200] * 8
        time.sleep(1.5)
        before = store_statements(service)
        time.sleep(4)
        open_ = store_statements(service) - before
        assert open_ - idle <= 4 * 3, (idle, open_)
        # and each still hears its own workspace's runs, only those
        run = tenants[5].client.run("print(5)", wait=False)
        seen = streams[5].until(lambda k, d: d.get("id") == run["id"] and d["state"] in TERMINAL, timeout=60)
        assert {d["id"] for _, d in seen} == {run["id"]}
        time.sleep(1.5)
        for i in (0, 6, 7):
            assert streams[i].q.empty(), i
    finally:
        for s in streams:
            s.close()


def test_a_stream_not_read_is_ended_not_buffered(service):
    """The node hands each change to every stream of its workspace as it
    reads it: a client that does not read would have them pile up in the
    service. Past 1 MiB waiting it is cut off (the page lists again); a
    stream that reads gets every change, 500 a look."""
    import datetime
    ws, _, people = tenant_with_people(service, "slow")
    _, admin = people["admin"]
    reader = Activity(service, admin.key)
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect((service.host, service.port))
    slow.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin.key}\r\n\r\n".encode())
    assert b" 200 " in slow.recv(200)
    try:
        run = admin.run("print(1)")
        reader.until(lambda k, d: d.get("id") == run["id"] and d["state"] == "succeeded")
        # 8,000 changes at once (copies of the run, behind the service's
        # back, changed now): about 10 MB of events, past what the sockets hold.
        # Copied as changed long ago, so that no look reads a copy before
        # the one change that brings them all (the run's own change time is
        # within a look's reach: on PostgreSQL's slower copy a look read 499
        # of them, then again as changed, rightly twice)
        copy_run(service, run["id"], 8000, changed_sql="'2000-01-01T00:00:00.000Z'")
        now = datetime.datetime.now(datetime.timezone.utc)
        service.sql("UPDATE runs SET changed_at = ? WHERE id LIKE ?",
                    now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z", run["id"] + "-%")
        got = reader.until(lambda k, d: d.get("id") == run["id"] + "-8000", timeout=60)
        assert len({d["id"] for _, d in got}) == 8000 == len(got)
        # and none again: the looks that reach back 3 s over them find
        # each handed out already
        time.sleep(4)
        assert reader.q.qsize() == 0, reader.q.qsize()
        # the one that did not read is ended: what it reads now ends
        slow.settimeout(30)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        total = 0
        while True:
            chunk = slow.recv(1 << 20)
            if not chunk:
                break
            total += len(chunk)
        assert total < 8000 * 1000, total
        assert "read more slowly than the workspace changed" in service.log_path.read_text(errors="replace")
    finally:
        reader.close()
        slow.close()


def test_persons_are_the_workspaces_own(service):
    ws, _, people = tenant_with_people(service, "ppl")
    _, member = people["member"]
    doc = member.ok("GET", "/v1/persons")
    assert doc == {"persons": [{"id": people[r][0], "name": f"ppl-{r}", "role": r}
                               for r in ("admin", "approver", "member")]}
    # another workspace sees its own only
    other = service.new_tenant("ppl-other")
    assert [p["id"] for p in other.client.ok("GET", "/v1/persons")["persons"]] == [other.person]
    status, _, doc = member.get("/v1/persons", query={"role": "admin"})
    assert_error(status, doc, "bad_request", 400)


def test_threads_newest_activity_first_with_runs_and_artifacts(service):
    ws, _, people = tenant_with_people(service, "thr")
    _, admin = people["admin"]
    write = "open('/out/{n}.txt', 'w').write('x')"
    admin.run(write.format(n="a"), thread_id="t-one")
    admin.run(write.format(n="a"), thread_id="t-one")     # a second version of the same path
    admin.run(write.format(n="b"), thread_id="t-one")
    admin.run("print(1)", thread_id="t-two")
    admin.run("print(2)")                                  # no thread: not listed
    doc = admin.ok("GET", "/v1/threads")
    assert [t["id"] for t in doc["threads"]] == ["t-two", "t-one"] and doc["next_cursor"] is None
    one = doc["threads"][1]
    assert one["runs"] == 3 and one["artifacts"] == 2, one
    assert doc["threads"][0]["runs"] == 1 and doc["threads"][0]["artifacts"] == 0
    runs = admin.list_runs(thread_id="t-one")
    assert one["last_run_at"] == max(r["created_at"] for r in runs)
    # new activity moves a thread to the front; pages follow next_cursor
    admin.run("print(3)", thread_id="t-one")
    page = admin.ok("GET", "/v1/threads", query={"limit": "1"})
    assert [t["id"] for t in page["threads"]] == ["t-one"] and page["next_cursor"]
    rest = admin.ok("GET", "/v1/threads", query={"limit": "1", "cursor": page["next_cursor"]})
    assert [t["id"] for t in rest["threads"]] == ["t-two"] and rest["next_cursor"] is None
    # another workspace's threads are not listed
    assert service.new_tenant("thr-other").client.ok("GET", "/v1/threads")["threads"] == []
    status, _, doc = admin.get("/v1/threads", query={"limit": "0"})
    assert_error(status, doc, "bad_request", 400)


def copy_run(service, run_id, n, thread_sql="NULL", changed_sql=None):
    """N copies of run RUN_ID written into the store behind the service's
    back (a long history, made in a second), each with thread THREAD_SQL
    (and, with CHANGED_SQL, that change time instead of the run's)."""
    cols = [c for c in service.columns("runs") if c != "seq"]
    sel = ", ".join("id || '-' || i" if c == "id" else thread_sql if c == "thread_id"
                    else changed_sql if c == "changed_at" and changed_sql else c for c in cols)
    gen = ("generate_series(1, ?) AS n(i)" if service.store else
           "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) SELECT i FROM n) n")
    service.sql(f"INSERT INTO runs ({', '.join(cols)}) SELECT {sel} FROM runs, {gen} WHERE runs.id = ? "
                f"ORDER BY i", n, run_id)


def test_threads_page_reads_a_bounded_window_of_runs(service):
    """A page of threads groups at most 10,000 of the workspace's runs, not
    its whole history (100,000 runs took 320 ms a page, any member's to
    repeat): a thread behind a longer stretch of runs is on a later page,
    which next_cursor leads to (the page between may hold none)."""
    ws, _, people = tenant_with_people(service, "thr-big")
    _, admin = people["admin"]
    old = admin.run("print(1)", thread_id="t-old")
    copy_run(service, old["id"], 10050)
    admin.run("print(2)", thread_id="t-new")
    page = admin.ok("GET", "/v1/threads")
    assert [t["id"] for t in page["threads"]] == ["t-new"] and page["next_cursor"], page
    seen, cursor = ["t-new"], page["next_cursor"]
    for _ in range(5):
        page = admin.ok("GET", "/v1/threads", query={"cursor": cursor})
        seen += [t["id"] for t in page["threads"]]
        if [t for t in page["threads"] if t["id"] == "t-old"]:
            assert page["threads"][-1]["runs"] == 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["t-new", "t-old"] and cursor is None, seen
    # a page that finds no thread in its window reads on (a few windows)
    _, _, people = tenant_with_people(service, "thr-gap")
    _, gap = people["admin"]
    only = gap.run("print(1)", thread_id="t-gap")
    copy_run(service, only["id"], 10050)
    page = gap.ok("GET", "/v1/threads")
    assert [t["id"] for t in page["threads"]] == ["t-gap"] and page["next_cursor"] is None, page


def e2b_create(client):
    status, _, doc = client.request("POST", "/sandboxes", json={"templateID": "base", "timeout": 120},
                                    headers={"X-API-KEY": client.key}, key=None)
    assert status == 201, (status, doc)
    return doc["sandboxID"], doc["envdAccessToken"]


def e2b_write(client, sid, token, path, data):
    boundary = "feedsboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    status, _, doc = client.request("POST", f"/files?path={path}", key=None, body=body,
                                    headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                                             "X-Access-Token": token,
                                             "Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert status == 200, (status, doc)


def test_sandboxes_list_files_and_kill_by_owner_or_admin(service):
    ws, _, people = tenant_with_people(service, "sbx")
    mid, member = people["member"]
    aid, admin = people["admin"]
    _, approver = people["approver"]
    sid, token = e2b_create(member)
    e2b_write(member, sid, token, "/home/user/data/a.csv", b"x,y\n1,2\n")
    e2b_write(member, sid, token, "/out/report.txt", b"done")
    lst = approver.ok("GET", "/v1/sandboxes")["sandboxes"]
    assert len(lst) == 1
    sb = lst[0]
    assert sb["id"] == sid and sb["state"] == "running" and sb["person"] == {"id": mid, "name": "sbx-member"}
    assert sb["files"] == 2 and sb["bytes"] >= 12, sb
    assert sb["created_at"] < sb["end_at"]
    files = approver.ok("GET", f"/v1/sandboxes/{sid}/files")["files"]
    assert files == [{"path": "/home/user/data/a.csv", "size": 8}, {"path": "/out/report.txt", "size": 4}]
    # another workspace sees none of it
    other = service.new_tenant("sbx-other").client
    assert other.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    status, _, doc = other.request("GET", f"/v1/sandboxes/{sid}/files")
    assert_error(status, doc, "not_found", 404)
    assert_error(*other.request("DELETE", f"/v1/sandboxes/{sid}")[::2], "not_found", 404)
    # a member or approver who does not own it may not kill it
    status, _, doc = approver.request("DELETE", f"/v1/sandboxes/{sid}")
    assert_error(status, doc, "forbidden", 403)
    assert "owner or an admin" in doc["error"]["message"]
    assert len(member.ok("GET", "/v1/sandboxes")["sandboxes"]) == 1
    # its owner may
    status, _, _ = member.request("DELETE", f"/v1/sandboxes/{sid}")
    assert status == 204
    assert member.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    assert_error(*member.request("GET", f"/v1/sandboxes/{sid}/files")[::2], "not_found", 404)
    # an admin may kill another's
    sid2, _ = e2b_create(member)
    status, _, _ = admin.request("DELETE", f"/v1/sandboxes/{sid2}")
    assert status == 204
    assert admin.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    kills = admin.ok("GET", "/v1/audit", query={"kind": "sandbox.kill"})
    assert {e["data"]["sandbox_id"] for e in kills["events"]} >= {sid, sid2}


def test_sandbox_files_are_files_whatever_a_command_left(service):
    """What a command in the box leaves in its tree (written here into the
    sandbox's directory, as the box's own writes land there) is shown as
    files only: a FIFO or a socket is not one (it was listed, size 0, and
    counted); a symlink to the host's files, a name with a control
    character or invalid UTF-8, a path too long to name are not shown; a
    tree past what a listing reads is said as such (it was a 500)."""
    import os
    ws, _, people = tenant_with_people(service, "hostile")
    _, member = people["member"]
    sid, token = e2b_create(member)
    e2b_write(member, sid, token, "/home/user/ok.txt", b"fine")
    home = service.state / "sandboxes" / sid / "home"
    os.mkfifo(home / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(home / "sock"))
    os.symlink("/etc/passwd", home / "passwd")
    (home / "bad\x01name").write_bytes(b"x")
    with open(os.path.join(bytes(home), b"\xff.txt"), "wb") as f:
        f.write(b"x")
    deep = home
    for _ in range(6):
        deep = deep / ("d" * 200)
    deep.mkdir(parents=True)
    (deep / "far.txt").write_bytes(b"x")
    files = member.ok("GET", f"/v1/sandboxes/{sid}/files")["files"]
    assert files == [{"path": "/home/user/ok.txt", "size": 4}], files
    assert member.ok("GET", "/v1/sandboxes")["sandboxes"][0]["files"] == 1
    sock.close()
    # more entries than a listing reads (a command may leave them)
    many = home / "many"
    many.mkdir()
    for i in range(8300):
        (many / str(i)).touch()
    status, _, doc = member.request("GET", f"/v1/sandboxes/{sid}/files")
    assert_error(status, doc, "too_many_files", 422)
    assert "more than 8192 entries" in doc["error"]["message"]
    assert member.ok("GET", "/v1/sandboxes")["sandboxes"][0]["files"] == -1


def test_a_percent_encoded_nul_does_not_cut_a_request_short(service):
    """%00 in a path or a query value was decoded to a NUL that ended the
    C string there: DELETE /v1/sandboxes/ID%00/files was served as DELETE
    /v1/sandboxes/ID (the sandbox killed), thread_id=t-a%00junk as t-a."""
    ws, _, people = tenant_with_people(service, "nul")
    _, member = people["member"]
    sid, _ = e2b_create(member)
    status, _, _ = member.request("DELETE", f"/v1/sandboxes/{sid}%00/files")
    assert status in (404, 405), status
    assert [sb["id"] for sb in member.ok("GET", "/v1/sandboxes")["sandboxes"]] == [sid]
    member.run("print(1)", thread_id="t-a")
    status, _, doc = member.get("/v1/runs", query={"thread_id": "t-a\x00junk"})
    assert_error(status, doc, "bad_request", 400)
    assert len(member.list_runs(thread_id="t-a")) == 1


def test_usage_days_count_runs_by_state_language_interface_and_credits(service):
    ws, _, people = tenant_with_people(service, "use")
    _, admin = people["admin"]
    service.admin("price", "set", "--workspace", ws, "2")
    admin.run("print(1)")
    admin.run("import sys; sys.exit(3)")
    admin.run("echo hi", language="bash")
    piston = admin.ok("POST", f"/piston/{admin.key}/api/v2/execute",
                      json={"language": "python", "version": "*", "files": [{"content": "print(3)"}]})
    assert piston["run"]["code"] == 0
    doc = admin.ok("GET", "/v1/usage")
    assert {"balance", "ledger", "runs", "days"} <= set(doc)
    days = doc["days"]
    assert len(days) == 30
    dates = [d["date"] for d in days]
    assert dates == sorted(dates) and len(set(dates)) == 30
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert dates[-1] == today
    d = days[-1]
    assert d["runs"] == 4
    assert d["by_state"] == {"succeeded": 3, "failed": 1}
    assert d["by_language"] == {"python": 3, "bash": 1}
    assert d["by_via"] == {"rest": 3, "piston": 1}
    assert d["credits"] == 8 == sum(r["credits"] for r in admin.list_runs())
    assert all(x["runs"] == 0 and x["by_state"] == {} and x["credits"] == 0 for x in days[:-1])
    # the workspace's totals agree
    assert doc["runs"]["by_state"] == d["by_state"]


def test_audit_verify_ok_then_names_the_first_tampered_event(service):
    ws, _, people = tenant_with_people(service, "aud")
    _, admin = people["admin"]
    _, member = people["member"]
    for i in range(3):
        member.run(f"print({i})")
    v = member.ok("GET", "/v1/audit/verify")
    assert v["ok"] is True and v["first_bad_seq"] is None and v["why"] is None and v["complete"] is True
    events = admin.ok("GET", "/v1/audit", query={"limit": "1000"})["events"]
    assert v["events"] == len(events) >= 3
    assert v["head"] == {"seq": events[0]["seq"], "hash": events[0]["hash"]}
    # the checkpoint the service signed is shown, and held
    assert admin.ok("GET", "/v1/audit/checkpoint")["seq"] == events[0]["seq"]
    v = member.ok("GET", "/v1/audit/verify")
    assert v["ok"] is True and v["checkpoint"] == {"seq": events[0]["seq"], "hash": events[0]["hash"],
                                                   "held": True}
    # one event's fields changed behind the service's back
    bad = events[-2]["seq"]
    n = service.sql_count("UPDATE audit_events SET data = ? WHERE workspace_id = ? AND seq = ?",
                          '{"forged": true}', ws, bad)
    assert n == 1
    v = member.ok("GET", "/v1/audit/verify")
    assert v["ok"] is False and v["first_bad_seq"] == bad, v
    assert "does not match its hash" in v["why"]
    assert v["checkpoint"]["held"] is False
    # another workspace's chain is its own, and intact
    other = service.new_tenant("aud-other").client
    other.run("print(1)")
    assert other.ok("GET", "/v1/audit/verify")["ok"] is True


def test_audit_export_is_ndjson_of_the_same_filter(service):
    ws, _, people = tenant_with_people(service, "exp")
    _, admin = people["admin"]
    runs = [admin.run(f"print({i})") for i in range(3)]
    status, hdrs, raw = admin.request("GET", "/v1/audit", query={"format": "ndjson"})
    assert status == 200
    assert hdrs["content-type"].startswith("application/x-ndjson")
    assert hdrs["content-disposition"].startswith("attachment;") and ".ndjson" in hdrs["content-disposition"]
    lines = raw.decode().splitlines()
    exported = [json.loads(l) for l in lines]
    listed = admin.ok("GET", "/v1/audit", query={"limit": "1000"})["events"]
    assert exported == listed and len(exported) >= 6
    # the same filter as the listing
    status, _, raw = admin.request("GET", "/v1/audit", query={"format": "ndjson", "run_id": runs[1]["id"]})
    one = [json.loads(l) for l in raw.decode().splitlines()]
    assert one and all(e["run_id"] == runs[1]["id"] for e in one)
    assert one == admin.ok("GET", "/v1/audit", query={"run_id": runs[1]["id"]})["events"]
    status, _, doc = admin.get("/v1/audit", query={"format": "csv"})
    assert_error(status, doc, "bad_request", 400)


def test_audit_exports_and_verifications_are_capped_per_person(service):
    """Exports a client does not read hold a connection and a thread each,
    and a verification re-hashes up to 200,000 events: a person has 2 under
    way at once (the third was served: 200), others theirs; a closed one
    gives its place back."""
    ws, _, people = tenant_with_people(service, "aud-cap")
    _, member = people["member"]
    _, approver = people["approver"]
    # a long trail (behind the service's back: the export does not check
    # links), some megabytes, so that an export not read stays open
    pad = "p" * 1000
    if service.store:
        service.sql("INSERT INTO audit_events (workspace_id, seq, org_id, kind, data, created_at, prev_hash, hash) "
                    "SELECT ?, 1000000 + i, 'o', 'test.filler', ?, '2026-01-01T00:00:00.000Z', 'x', 'y' "
                    "FROM generate_series(1, 20000) AS i", ws, json.dumps({"pad": pad}))
    else:
        service.sql("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000) "
                    "INSERT INTO audit_events (workspace_id, seq, org_id, kind, data, created_at, prev_hash, hash) "
                    "SELECT ?, 1000000 + i, 'o', 'test.filler', ?, '2026-01-01T00:00:00.000Z', 'x', 'y' FROM c",
                    ws, json.dumps({"pad": pad}))

    def export(key):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((service.host, service.port))
        s.sendall(f"GET /v1/audit?format=ndjson HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
                  .encode())
        head = s.recv(1024).split(b"\r\n")[0]
        return s, int(head.split()[1])

    held = [export(member.key) for _ in range(2)]
    try:
        assert [st for _, st in held] == [200, 200]
        _, third = export(member.key)
        assert third == 429
        status, _, doc = member.get("/v1/audit/verify")
        assert_error(status, doc, "too_many_requests", 429)
        assert "audit verifications and exports" in doc["error"]["message"]
        # another person's are their own
        assert approver.ok("GET", "/v1/audit/verify")["events"] >= 1
        held.pop()[0].close()
        deadline = time.monotonic() + 10
        while member.get("/v1/audit/verify")[0] != 200:
            assert time.monotonic() < deadline, "a closed export's place was not given back"
            time.sleep(0.3)
    finally:
        for s, _ in held:
            s.close()


@pytest.mark.only_passes("postgresql")
def test_events_see_the_runs_of_another_node(tmp_path):
    """Two nodes on one PostgreSQL database: a stream held by one sees a run
    asked of the other, through to its end."""
    import pg_util
    from service_util import Service, wait_no_boxes
    need(pg_util.test_store() == "postgresql",
         "a PostgreSQL store for two nodes (the postgresql pass: AIRLOCK_TEST_STORE=postgresql)")
    store = pg_util.cluster().uri(pg_util.cluster().new_database("feeds"))
    a = Service(tmp_path / "state", config={"max_concurrent": 2}, store=store)
    b = Service(tmp_path / "state", config={"max_concurrent": 2}, store=store, bootstrap=False, key=a.key)
    b.log_path = tmp_path / "node-b.log"
    a.start()
    b.start()
    try:
        watch = Activity(a, a.key)
        assert watch.status == 200
        try:
            # a run asked of B: its creation is B's write, which nothing on
            # A wakes for; whichever node then runs it, A's stream follows it
            run = b.run("import time; time.sleep(0.5); print('b')", wait=False)
            seen = watch.until(lambda k, d: d["id"] == run["id"] and d["state"] in TERMINAL, timeout=60)
            states = [d["state"] for _, d in seen if d["id"] == run["id"]]
            assert states[-1] == "succeeded" and len(states) >= 2, states
        finally:
            watch.close()
    finally:
        b.stop()
        a.stop()
        wait_no_boxes(15)


def test_a_console_session_reads_the_feeds_and_changes_need_its_csrf_token(service):
    """The console's cookie reads these routes as its person's key would;
    a kill needs the CSRF token; the activity stream opens with the cookie."""
    from test_console_auth import sign_in
    ws, _, people = tenant_with_people(service, "ses")
    mid, member = people["member"]
    console, _, _ = sign_in(service, mid)
    assert [p["id"] for p in console.ok("GET", "/v1/persons")["persons"]] == [people[r][0]
                                                                              for r in ("admin", "approver", "member")]
    run = member.run("print(1)")
    assert [r["id"] for r in console.ok("GET", "/v1/runs", query={"person_id": mid})["runs"]] == [run["id"]]
    assert console.ok("GET", "/v1/usage")["days"][-1]["runs"] == 1
    assert console.ok("GET", "/v1/audit/verify")["ok"] is True
    sid, _ = e2b_create(member)
    status, _, doc = console.request("DELETE", f"/v1/sandboxes/{sid}", csrf=False)
    assert_error(status, doc, "csrf_required", 403)
    assert [b["id"] for b in console.ok("GET", "/v1/sandboxes")["sandboxes"]] == [sid]
    console.ok("DELETE", f"/v1/sandboxes/{sid}", want=204)
    # the stream, with the cookie and no key
    conn = http.client.HTTPConnection(service.host, service.port, timeout=30)
    try:
        conn.request("GET", "/v1/events", headers={"Cookie": f"airlock_session={console.cookie}"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
        assert resp.readline() == b": listening\n"
    finally:
        conn.close()
