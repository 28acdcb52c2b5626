"""The service's log as an operator reads it (docs/operations.md, "Watching
it"): every line is one JSON object with a level; a start says nothing at
warn or error; a client leaving an event stream is not the service's error;
the access log (access_log = true) says method, route pattern, status, time
and person, and is off by default; run.end names the person, language,
driver and exit."""
import http.client
import json
import re
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from service_util import GOV_TERMINAL, gov_tenant, put_settings, service_binary, services  # noqa: F401
from test_service_ops import API

LEVELS = {"info", "warn", "error"}


def log_lines(svc, since=0):
    """The JSON objects the service logged since byte SINCE of its log (the
    test harness's own "=====" lines left out); fails on a line that is not
    one object with a level."""
    text = svc.log_path.read_bytes()[since:].decode(errors="replace")
    out = []
    for line in text.splitlines():
        if not line or line.startswith("===== start"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            raise AssertionError(f"a log line that is not JSON: {line!r}")
        assert isinstance(doc, dict) and doc.get("level") in LEVELS, f"a log line without a level: {line!r}"
        assert doc.get("event") and doc.get("time"), line
        out.append(doc)
    return out


# what a test's state lacks (the service binary is a copy outside the
# source tree: no bundled skills; no image built into its state) is said at
# every start, as a warning by design
STATE_LACKS = {"skills.none", "images.none"}


def loud(lines):
    return [d for d in lines if d["level"] != "info" and d["event"] not in STATE_LACKS]


def test_start_and_stop_log_only_info(services):
    """A start, a run and a stop: every line has a level, none is a warning
    or an error (libmicrohttpd's option-order warning was logged as
    http.error on every start)."""
    svc = services.start("quiet")
    assert svc.run("print('hi')")["state"] == "succeeded"
    assert svc.stop() == 0
    lines = log_lines(svc)
    events = [d["event"] for d in lines]
    assert "service.start" in events and "service.stop" in events and "run.end" in events, events
    assert not loud(lines), loud(lines)
    assert not [d for d in lines if d["event"].startswith("http.")], lines


def _follow_and_leave(svc, run_id, how):
    conn = http.client.HTTPConnection(svc.host, svc.port, timeout=10)
    conn.request("GET", f"/v1/runs/{run_id}/events", headers=svc._headers(svc.key, {"Accept": "text/event-stream"}))
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"id: ")
    time.sleep(0.3)
    if how == "reset":
        # SO_LINGER 0: the close sends a reset, as a killed client's kernel may
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    elif how == "shutdown":
        conn.sock.shutdown(socket.SHUT_RDWR)
    conn.sock.close()
    conn.close()


def test_client_leaving_an_event_stream_is_not_an_error(services):
    """Clients that leave an event stream, while its events flow (the
    service's next write fails) and while it is idle (the service notices
    between events), by close, shutdown and reset: the service logs no
    warning or error for any of them."""
    svc = services.start("sse")
    flowing = "import time\nfor i in range(8):\n    print(i, flush=True); time.sleep(0.4)"
    idle = "import time\nprint('one', flush=True); time.sleep(3)"
    runs = []
    for how in ("close", "shutdown", "reset"):
        for code in (flowing, idle):
            status, _, doc = svc.post_run(code)
            assert status == 201, doc
            _follow_and_leave(svc, doc["id"], how)
            runs.append(doc["id"])
    for run_id in runs:
        assert svc.wait_state(run_id, {"succeeded"})["state"] == "succeeded"
    # the idle streams notice their client within a second
    time.sleep(1.5)
    lines = log_lines(svc)
    assert not loud(lines), loud(lines)
    # the stream still works for a client that stays
    assert [e for _, e, _ in svc.events(runs[0])][-1] == "result"
    svc.stop()
    assert not loud(log_lines(svc)), loud(log_lines(svc))


def _access(lines):
    return [d for d in lines if d["event"] == "http.access"]


def test_access_log_off_by_default(services):
    svc = services.start("noaccess")
    svc.ok("GET", "/v1/settings")
    svc.run("print(1)")
    svc.stop()
    assert not _access(log_lines(svc))


def test_access_log_says_method_route_status_time_person(services):
    svc = services.start("access", {"access_log": "true"})
    since = svc.log_path.stat().st_size
    svc.ok("GET", "/v1/settings")
    run = svc.run("import sys; sys.exit(3)")
    assert run["state"] == "failed"
    status, _, _ = svc.get(f"/v1/runs/{run['id']}")
    assert status == 200
    status, _, _ = svc.get("/v1/runs/run_nosuchrun0000000000")
    assert status == 404
    # a Piston URL carries its key, a query string may carry anything
    secret = "al_" + "k" * 40
    assert svc.get(f"/piston/{secret}/api/v2/runtimes", key=None)[0] == 401
    # (refused or not: its access line is the question)
    queried = svc.get("/v1/runs", query={"token": secret})[0]
    assert svc.get("/v1/settings", key=None)[0] == 401
    time.sleep(0.3)
    lines = log_lines(svc, since)
    acc = _access(lines)
    text = svc.log_path.read_bytes()[since:].decode(errors="replace")
    assert secret not in text and run["id"] not in json.dumps(acc), acc
    person = [d for d in lines if d["event"] == "run.end"][0]["person_id"]
    assert person.startswith("per_"), lines
    def one(method, route, status):
        hits = [d for d in acc if d["method"] == method and d["route"] == route and d["status"] == status]
        assert hits, (method, route, status, acc)
        return hits[0]
    for d in acc:
        assert set(d) >= {"method", "route", "status", "ms", "person_id", "end", "level", "time"}, d
        assert d["level"] == "info" and isinstance(d["ms"], int) and d["ms"] >= 0, d
    assert one("GET", "/v1/settings", 200)["person_id"] == person
    assert one("POST", "/v1/runs", 200)["end"] == "completed"
    one("GET", "/v1/runs/{id}", 200)
    one("GET", "/v1/runs/{id}", 404)
    assert one("GET", "/piston/{key}/api/v2/runtimes", 401)["person_id"] is None
    one("GET", "/v1/runs", queried)
    assert one("GET", "/v1/settings", 401)["person_id"] is None
    svc.stop()


def test_access_log_names_every_route_by_its_pattern(services):
    """Every operation of docs/api.md (test_service_ops's list), asked
    without a key: its access line's route is the documented path with each
    value a client chose as {id} (a Piston URL's key as {key})."""
    svc = services.start("routes", {"access_log": "true"})
    since = svc.log_path.stat().st_size
    want = []
    for method, path in API:
        url = re.sub(r"\{[^}]*\}", "zq1value", path)
        svc.request(method, url, key=None, body=b"" if method != "GET" else None)
        want.append((method, re.sub(r"\{[^}]*\}", "{id}", path).replace("/piston/{id}/", "/piston/{key}/")))
    time.sleep(0.3)
    got = {(d["method"], d["route"]) for d in _access(log_lines(svc, since))}
    missing = [w for w in want if w not in got]
    assert not missing, (missing, sorted(got))
    svc.stop()


def test_access_log_setting_is_checked():
    """access_log takes true or false; anything else stops the start."""
    d = Path(tempfile.mkdtemp(prefix="airlock-acc-"))
    (d / "c.conf").write_text("access_log = yes\n")
    proc = subprocess.run([str(service_binary()), "serve", "--state", str(d / "st"), "--config", str(d / "c.conf")],
                          capture_output=True, timeout=30)
    assert proc.returncode == 125 and b"access_log = yes: want true or false" in proc.stderr, proc


def test_run_end_names_person_language_driver_exit(services):
    svc = services.start("runend")
    since = svc.log_path.stat().st_size
    py = svc.run("import sys; sys.exit(7)")
    sh = svc.run("echo hi", language="bash")
    killed = svc.run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    svc.stop()
    ends = {d["run_id"]: d for d in log_lines(svc, since) if d["event"] == "run.end"}
    person = ends[py["id"]]["person_id"]
    assert person.startswith("per_")
    want = {py["id"]: ("python", "failed", 7), sh["id"]: ("bash", "succeeded", 0)}
    for run_id, (lang, state, code) in want.items():
        d = ends[run_id]
        assert (d["language"], d["state"], d["exit_code"], d["person_id"]) == (lang, state, code, person), d
        assert d["driver"] == svc.config.get("driver", "native") and d["level"] == "info", d
        assert isinstance(d["wall_ms"], int) and d["workspace_id"].startswith("ws_"), d
    k, res = ends[killed["id"]], killed["result"]
    assert res["signal"] == 9 and (k["signal"], k["exit_code"], k["state"]) == (9, res["exit_code"], killed["state"]), \
        (k, killed)


def test_every_end_of_a_run_has_its_run_end(services):
    """Runs that never reached a box end too: canceled while queued, denied,
    withdrawn while waiting for approval. Each has its run.end, with who,
    what and how (no exit: it never ran)."""
    svc = services.start("unrun", {"per_person_concurrency": 1})
    since = svc.log_path.stat().st_size
    status, _, first = svc.post_run("import time; time.sleep(30)")
    assert status == 201, first
    svc.wait_state(first["id"], {"running"})
    status, _, queued = svc.post_run("print('never')")
    assert status == 201 and queued["state"] == "queued", queued
    assert svc.cancel(queued["id"])[0] == 202
    assert svc.cancel(first["id"])[0] == 202
    t = gov_tenant(svc, "ends")
    approver_id, approver = t.person_in("approver")
    member_id, member = t.person_in("member")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    runs = {}
    for how in ("deny", "withdraw"):
        status, _, run = member.post_run("print('never')")
        assert status == 201 and run["state"] == "pending_approval", run
        if how == "deny":
            assert approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "no"})[0] in (200, 202)
        else:
            assert member.cancel(run["id"])[0] in (200, 202)
        runs[how] = member.wait_state(run["id"], GOV_TERMINAL, timeout=15)
    svc.wait_state(first["id"], {"canceled"})
    svc.stop()
    ends = {d["run_id"]: d for d in log_lines(svc, since) if d["event"] == "run.end"}
    want = {queued["id"]: ("canceled", "canceled"), first["id"]: ("canceled", None),
            runs["deny"]["id"]: ("denied", runs["deny"]["error"]["code"]),
            runs["withdraw"]["id"]: (runs["withdraw"]["state"], runs["withdraw"]["error"]["code"])}
    for run_id, (state, code) in want.items():
        assert run_id in ends, (run_id, sorted(ends))
        d = ends[run_id]
        assert d["state"] == state and d["language"] == "python" and d["driver"], d
        if code:
            assert d["error"] == code, d
    assert ends[runs["deny"]["id"]]["person_id"] == member_id and ends[runs["deny"]["id"]]["exit_code"] is None


def test_an_mcp_stream_taken_over_by_a_resume_is_not_an_error(services):
    """An MCP client whose stream broke resumes it on a new connection: the
    old connection is taken over (it ended with an error, which
    libmicrohttpd logged as the service's own, once per resume)."""
    from test_mcp import SLOW_LINES, WANT, Mcp, resume, start_call, stdout_of
    svc = services.start("mcpresume")
    since = svc.log_path.stat().st_size
    m = Mcp(svc)
    rid, first = start_call(m, SLOW_LINES)
    assert first.status == 200, first.headers
    got, last = [], None
    for eid, msg in first.events():
        last = eid if eid is not None else last
        got.append((eid, msg))
        if "line2" in stdout_of(got):
            break
    # the client goes without a word: its old connection still reads
    first.conn.sock.close()
    again = resume(m, last)
    assert again.status == 200, again.status
    rest = list(again.events())
    assert stdout_of(got + rest) == WANT
    time.sleep(0.5)
    lines = log_lines(svc, since)
    assert not loud(lines), loud(lines)


def test_a_run_airlock_lost_has_its_run_end(services):
    """A run lost to the service's kill -9 ends at the next start (error,
    lost): run.lost says why, and its run.end is there like any other's."""
    svc = services.start("lost")
    status, _, doc = svc.post_run("import time; time.sleep(60)")
    assert status == 201, doc
    svc.wait_state(doc["id"], {"running"})
    svc.kill9()
    since = svc.log_path.stat().st_size
    svc.start()
    run = svc.wait_state(doc["id"], {"error"})
    assert run["error"]["code"] == "lost", run
    svc.stop()
    lines = log_lines(svc, since)
    ends = [d for d in lines if d["event"] == "run.end" and d["run_id"] == doc["id"]]
    assert len(ends) == 1, lines
    assert (ends[0]["state"], ends[0]["error"], ends[0]["level"], ends[0]["language"]) == \
        ("error", "lost", "warn", "python"), ends
    assert [d for d in lines if d["event"] == "run.lost" and d["run_id"] == doc["id"]], lines


def test_a_malformed_request_is_the_clients_fault_not_the_services_error(services):
    """Requests libmicrohttpd refuses itself (a request line that is not
    HTTP, headers past its memory) are logged as http.client_error at warn:
    they were http.error at error, as if the service had failed."""
    svc = services.start("malformed")
    since = svc.log_path.stat().st_size
    for raw in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"):
        with socket.create_connection((svc.host, svc.port), timeout=10) as s:
            s.sendall(raw)
            s.recv(100)
    time.sleep(0.3)
    lines = log_lines(svc, since)
    said = [d for d in lines if d["event"] == "http.client_error"]
    assert said and all(d["level"] == "warn" for d in said), lines
    assert not [d for d in lines if d["level"] == "error"], lines
    svc.stop()


def test_to_the_journal_each_line_carries_its_syslog_priority(services, tmp_path):
    """Where stderr is the journal's stream (JOURNAL_STREAM names its device
    and inode, as systemd sets it), each line starts with its priority, <6>
    info, <4> warn, <3> error, which journald keeps as the entry's PRIORITY;
    anywhere else (the variable naming another file) the line is the JSON
    object alone. Here the stream is the service's log file."""
    plain = services.start("notjournal", extra_env={"JOURNAL_STREAM": "1:1"})
    plain.stop()
    assert log_lines(plain)
    svc = services.start("journal")
    svc.stop()
    st = svc.log_path.stat()
    svc.extra_env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
    since = st.st_size
    svc.start()
    svc.get("/healthz", key=None)
    svc.stop()
    prio = {"info": "<6>", "warn": "<4>", "error": "<3>"}
    seen = set()
    for line in svc.log_path.read_bytes()[since:].decode().splitlines():
        if not line or line.startswith("====="):
            continue
        m = re.match(r"^(<[0-9]>)(\{.*\})$", line)
        assert m, line
        doc = json.loads(m.group(2))
        assert prio[doc["level"]] == m.group(1), line
        seen.add(doc["level"])
    # a test's state lacks skills and images: warnings (STATE_LACKS) beside the info
    assert seen >= {"info", "warn"}, seen
