"""The E2B session box (issue 35): one box per sandbox holding interpreter
state and background commands between calls, behind the workspace setting
e2b_session_box (docs/api.md, "Session box"). With it on: a cell's names
kept for the next, a background process alive at the next call, a file
written by one call read by the next, a call's timeout killing that call
only, kill and pause ending its processes (pause keeping its files), a
session box that died (OOM) making its call end error and the next call
start a new one. With it off: today's fresh box per call. Below those, the
agent that runs inside the session box (src/drivers/session_agent.py), run
as a plain process; the service's side of the channel is
tests/unit/test_sandbox_session.c's."""
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from node_util import node_test, npm_ci
from service_util import assert_no_boxes, gov_tenant, service, services, shutdown  # noqa: F401
from test_e2b_commands import create, start


def _set(service, **fields):
    service.ok("PATCH", "/v1/settings", json=fields)


def _on(service):
    """The service's own workspace with the session box on."""
    _set(service, e2b_session_box=True)


def _off(service):
    """The setting off again, and (a test that failed half-way) no sandbox
    of the service's left with a session box for the next test to see."""
    st, _, listed = service.request("GET", "/sandboxes", key=None, headers={"X-API-KEY": service.key})
    for sb in listed if st == 200 and isinstance(listed, list) else []:
        service.request("DELETE", f"/sandboxes/{sb['sandboxID']}", key=None, headers={"X-API-KEY": service.key})
    _set(service, e2b_session_box=False)


def test_the_setting_is_a_bool_shown_false_and_true_taken_on_native(service):
    t = gov_tenant(service, "e2bsess")
    assert t.client.ok("GET", "/v1/settings")["e2b_session_box"] is False
    for bad in ["yes", 1, None, []]:
        status, _, doc = t.client.request("PATCH", "/v1/settings", json={"e2b_session_box": bad})
        assert status == 400 and "e2b_session_box must be true or false" in doc["error"]["message"], (bad, status, doc)
    assert t.client.ok("PATCH", "/v1/settings", json={"e2b_session_box": True})["e2b_session_box"] is True
    assert t.client.ok("GET", "/v1/settings")["e2b_session_box"] is True
    # approvals bind a command's files as home/ has them; a session box's
    # are its own: the two are refused together, either way round
    status, _, doc = t.client.request("PATCH", "/v1/settings", json={"approval_policy": "always"})
    assert status == 400 and "do not go together" in doc["error"]["message"], (status, doc)
    t.client.ok("PATCH", "/v1/settings", json={"e2b_session_box": False})
    t.client.ok("PATCH", "/v1/settings", json={"approval_policy": "high_risk"})
    status, _, doc = t.client.request("PATCH", "/v1/settings", json={"e2b_session_box": True})
    assert status == 400 and "do not go together" in doc["error"]["message"], (status, doc)
    assert t.client.ok("PATCH", "/v1/settings", json={"approval_policy": "never", "e2b_session_box": True})[
        "e2b_session_box"] is True
    assert t.client.ok("PATCH", "/v1/settings", json={"e2b_session_box": False})["e2b_session_box"] is False


def _stdout(frames):
    return b"".join(base64.b64decode(json.loads(f)["event"]["data"]["stdout"])
                    for fl, f in frames if fl == 0 and b'"stdout"' in f)


def _end(frames):
    for fl, f in frames:
        doc = json.loads(f)
        end = (doc.get("event") or {}).get("end")
        if end is not None:
            return end
        if fl & 2:
            return doc
    return None


def _bash(service, sid, token, script, timeout_ms=None):
    proc = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", script]}}
    frames = start(service, sid, token, json.dumps(proc).encode(),
                   headers={"Connect-Timeout-Ms": str(timeout_ms)} if timeout_ms else None)
    return _stdout(frames), _end(frames)


def _cell(service, sid, token, code):
    status, _, raw = service.request("POST", "/execute", key=None, json={"code": code}, timeout=60, headers={
        "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "X-Access-Token": token})
    assert status == 200, (status, raw)
    raw = raw if isinstance(raw, str) else raw.decode() if isinstance(raw, bytes) else json.dumps(raw)
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


# whether a `sleep 61` runs in the box (ps is not in every image)
SLEEPING = ("for f in /proc/[0-9]*/cmdline; do [ \"$(tr '\\0' ' ' < $f 2>/dev/null)\" = 'sleep 61 ' ] && "
            "echo alive && break; done | grep -q alive && echo alive")


def _file(service, sid, token, path="/home/user/p.txt"):
    return service.request("GET", "/files", key=None, query={"path": path}, headers={
        "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token})


def _last_run(service, sid):
    runs = service.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}"})["runs"]
    return service.ok("GET", f"/v1/runs/{runs[0]['id']}")


def test_the_sdks_with_the_session_box(service):
    """The unmodified SDKs (tests/e2e/e2b_session.test.mjs): x = 1 then
    x + 1 is 2; a background process alive at the next call; a timeout."""
    npm_ci()
    _on(service)
    try:
        node_test("e2b_session.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key},
                  expect=1)
        assert_no_boxes(what="after the SDK's sandbox was killed")
    finally:
        _off(service)


def test_with_the_setting_off_files_carry_over_and_processes_do_not(service):
    """Differential: the file a command wrote is read by the next; the
    background process it started is gone by then (its box ended with it)."""
    _off(service)
    sid, token = create(service)
    info = service.request("GET", f"/sandboxes/{sid}", key=None, headers={"X-API-KEY": service.key})[2]
    assert "airlock" not in info, info
    out, _ = _bash(service, sid, token, "sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo kept > note.txt; "
                   "kill -0 $(cat bg.pid) && echo alive")
    assert out == b"alive\n", out
    out, _ = _bash(service, sid, token, "cat note.txt; kill -0 $(cat bg.pid) 2>/dev/null && echo alive || echo gone")
    assert out == b"kept\ngone\n", out
    assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204


def test_a_session_keeps_names_processes_and_files_between_calls(service):
    _on(service)
    try:
        sid, token = create(service)
        out, _ = _bash(service, sid, token, "echo kept > note.txt; sleep 60 >/dev/null 2>&1 & echo $!")
        bg = int(out)
        assert _last_run(service, sid)["result"]["box"]["session"] is True
        lines = _cell(service, sid, token, "x = 1")
        assert not [l for l in lines if l.get("type") == "error"], lines
        lines = _cell(service, sid, token, "x + 1")
        assert [l["text"] for l in lines if l.get("type") == "result"] == ["2"], lines
        out, _ = _bash(service, sid, token, f"cat note.txt; kill -0 {bg} && echo alive")
        assert out == b"kept\nalive\n", out
        # a call's timeout kills that call only
        t0 = time.monotonic()
        out, end = _bash(service, sid, token, "echo before; sleep 60; echo after", timeout_ms=1000)
        assert out == b"before\n" and time.monotonic() - t0 < 15, (out, end)
        out, _ = _bash(service, sid, token, f"kill -0 {bg} && echo still; cat note.txt")
        assert out == b"still\nkept\n", out
        assert _last_run(service, sid)["result"]["box"]["session"] is True
        # the channel holds the running calls only: this one's request (the
        # timed-out call's stream ended at its deadline; its run, canceled
        # then, may take a moment more to end)
        for _ in range(100):
            runs = service.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}"})["runs"]
            if not [r for r in runs if r["state"] in ("queued", "provisioning", "running")]:
                break
            time.sleep(0.1)
        out, _ = _bash(service, sid, token, "ls /skill/req")
        run = _last_run(service, sid)
        assert out == f"{run['id']}.json\n".encode(), out
        # killed: no process of it is left
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
        assert_no_boxes(what="after the sandbox's kill")
    finally:
        _off(service)


def test_another_tenants_session_box_cannot_reach_this_ones_channel(service):
    """The channel is bound into its own sandbox's box only: another
    tenant's session box sees its own requests (never this one's code) and
    cannot read its out/ (the service's, 0700)."""
    _on(service)
    t = gov_tenant(service, "e2bsess2")
    t.client.ok("PATCH", "/v1/settings", json={"e2b_session_box": True})
    try:
        sid, token = create(service)
        marker = uuid.uuid4().hex
        out, _ = _bash(service, sid, token, f"echo {marker}")
        assert out == f"{marker}\n".encode()
        st, _, doc = service.request("POST", "/v2/sandboxes", key=None, json={"templateID": "base"},
                                     headers={"X-API-KEY": t.key})
        assert st == 201, (st, doc)
        sid2, token2 = doc["sandboxID"], doc["envdAccessToken"]
        out, _ = _bash(service, sid2, token2, f"grep -rl {marker} /skill /run 2>/dev/null | grep -v '^/skill/req/' "
                       f"; cat /skill/req/*.json | grep -c {marker}; ls /skill/out 2>&1 | head -1")
        lines = out.decode().splitlines()
        # its own request holds the marker (its code greps for it); no other
        assert lines[0] == "1" and "Permission denied" in lines[1], out
        # nor does its token open the other sandbox
        assert _bash_status(service, sid, token2) == 401
        for s_ in (sid, sid2):
            assert service.request("DELETE", f"/sandboxes/{s_}", headers={
                "X-API-KEY": service.key if s_ == sid else t.key})[0] == 204
    finally:
        t.client.ok("PATCH", "/v1/settings", json={"e2b_session_box": False})
        _off(service)


def _bash_status(service, sid, token):
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-c", "true"]}}).encode()
    import struct
    env = struct.pack(">BI", 0, len(body)) + body
    return service.request("POST", "/process.Process/Start", key=None, body=env, headers={
        "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
        "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})[0]


def test_pause_ends_the_processes_and_keeps_the_files(service):
    _on(service)
    try:
        sid, token = create(service)
        out, _ = _bash(service, sid, token, "echo paused-kept > p.txt; sleep 61 >/dev/null 2>&1 & echo $!")
        assert int(out) > 0
        assert _bash(service, sid, token, SLEEPING)[0] == b"alive\n"
        # while the session box lives its files are its own: the files API
        # refuses, saying so, rather than read or write a stale home
        st, _, doc = _file(service, sid, token)
        assert st == 409 and "session box holds /home/user" in doc["message"], (st, doc)
        info = service.request("GET", f"/sandboxes/{sid}", key=None, headers={"X-API-KEY": service.key})[2]
        sess = info["airlock"]["sessionBox"]
        assert sess["shared"] is True and sess["pause"] == "files kept, processes ended", info
        assert sess["memoryMB"] == info["memoryMB"] and sess["lifetimeMaxS"] > 0, info
        st, _, doc = service.request("POST", f"/sandboxes/{sid}/pause", headers={"X-API-KEY": service.key})
        assert st == 204, (st, doc)
        assert_no_boxes(what="after the sandbox's pause")

        st, _, doc = service.request("POST", f"/sandboxes/{sid}/connect", json={"timeout": 60},
                                     headers={"X-API-KEY": service.key})
        assert st in (200, 201), (st, doc)
        # ended, its /work flowed back: the files API reads what the call
        # wrote (409 only while the ended box's files are still on the way)
        for _ in range(50):
            st, _, doc = _file(service, sid, token)
            if st != 409:
                break
            time.sleep(0.1)
        assert st == 200 and doc == b"paused-kept\n", (st, doc)
        # by its command line: a pid is a new box's own after the pause
        out, _ = _bash(service, sid, token, f"cat p.txt; {SLEEPING} || echo gone")
        assert out == b"paused-kept\ngone\n", out
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    finally:
        _off(service)


def test_a_canceled_call_has_its_process_group_killed_and_the_box_goes_on(service):
    _on(service)
    try:
        sid, token = create(service)
        _cell(service, sid, token, "x = 5")
        th = threading.Thread(target=lambda: _bash(service, sid, token, "echo started; sleep 62; echo after"))
        th.start()
        run = None
        for _ in range(100):
            run = _last_run(service, sid)
            if run["state"] == "running" and run["language"] == "bash":
                break
            time.sleep(0.1)
        time.sleep(0.5)
        st, _, doc = service.request("POST", f"/v1/runs/{run['id']}/cancel")
        assert st in (200, 202), (st, doc)
        th.join(20)
        assert not th.is_alive()
        run = service.ok("GET", f"/v1/runs/{run['id']}")
        assert run["state"] == "canceled" and run["result"]["box"]["session"] is True, run
        out, _ = _bash(service, sid, token, SLEEPING.replace("61", "62") + " || echo gone")
        assert out == b"gone\n", out
        lines = _cell(service, sid, token, "x")
        assert [l["text"] for l in lines if l.get("type") == "result"] == ["5"], lines
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    finally:
        _off(service)


def test_a_call_while_another_node_holds_the_session_box_is_refused_saying_so(service):
    """The node holding a session box says so in its channel (a holder file
    it keeps fresh); a call another node claims meanwhile is refused, and
    one past a dead holder's (a stale file) starts a new box."""
    _on(service)
    try:
        sid, token = create(service)
        assert _bash(service, sid, token, "echo one")[0] == b"one\n"
        st, _, doc = service.request("POST", f"/sandboxes/{sid}/pause", headers={"X-API-KEY": service.key})
        assert st == 204, (st, doc)
        assert_no_boxes(what="after the pause")
        service.request("POST", f"/sandboxes/{sid}/connect", json={"timeout": 60}, headers={"X-API-KEY": service.key})
        holder = service.state / "sandboxes" / sid / "session" / "holder"
        for _ in range(50):           # the ended box's keeper removes its own
            if not holder.exists():
                break
            time.sleep(0.1)
        holder.write_text("node_elsewhere")
        out, end = _bash(service, sid, token, "echo two")
        run = _last_run(service, sid)
        assert out == b"" and run["state"] == "error" and "held by node node_elsewhere" in run["error"]["message"], run
        old = time.time() - 60
        os.utime(holder, (old, old))
        assert _bash(service, sid, token, "echo three")[0] == b"three\n"
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    finally:
        _off(service)


def test_the_services_stop_ends_its_session_boxes_and_flows_their_files_back(services):
    svc = services.start("sessstop", config={"max_concurrent": 4})
    svc.ok("PATCH", "/v1/settings", json={"e2b_session_box": True})
    sid, token = create(svc)
    out, _ = _bash(svc, sid, token, "echo at-stop > s.txt; sleep 61 >/dev/null 2>&1 & echo started")
    assert out == b"started\n"
    shutdown(svc)             # asserts that no box process or cgroup is left
    assert (svc.state / "sandboxes" / sid / "home" / "s.txt").read_text() == "at-stop\n"


def _agents():
    """The pids of the session boxes' agents on this host."""
    pids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and b"/skill/agent.py" in open(f"/proc/{p}/cmdline", "rb").read():
                pids.append(int(p))
        except OSError:
            pass
    return pids


def test_a_cell_out_of_memory_ends_error_and_the_next_cell_starts_afresh(service):
    _on(service)
    _set(service, memory_mb=128)
    try:
        sid, token = create(service)
        _cell(service, sid, token, "x = 41")
        _cell(service, sid, token, "b = bytearray(400 << 20)")
        run = _last_run(service, sid)
        assert run["state"] == "error" and "memory limit" in run["error"]["message"], run
        lines = _cell(service, sid, token, "x")
        assert [l["name"] for l in lines if l.get("type") == "error"] == ["NameError"], lines
        lines = _cell(service, sid, token, "x = 1\nx + 1")
        assert [l["text"] for l in lines if l.get("type") == "result"] == ["2"], lines
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    finally:
        _set(service, memory_mb=512)
        _off(service)


def test_a_session_box_that_died_ends_its_call_error_and_the_next_call_gets_a_new_one(service):
    _on(service)
    try:
        sid, token = create(service)
        _cell(service, sid, token, "x = 41")
        before = set(_agents())
        assert len(before) >= 1
        done = []
        th = threading.Thread(target=lambda: done.append(_bash(service, sid, token, "echo started; sleep 30")))
        th.start()
        time.sleep(1.5)
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        th.join(30)
        run = _last_run(service, sid)
        assert run["state"] == "error" and "session box ended during this call" in run["error"]["message"], run
        lines = _cell(service, sid, token, "x")
        assert [l["name"] for l in lines if l.get("type") == "error"] == ["NameError"], lines
        # ... and says why its names are gone
        said = "".join(l.get("text", "") for l in lines if l.get("type") == "stderr")
        assert "a new session box was started" in said and "its agent exited" in said, lines
        out, _ = _bash(service, sid, token, "echo fresh")
        assert out == b"fresh\n"
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
        assert_no_boxes(what="after the sandbox's kill")
    finally:
        _off(service)


# ------------------------------------------------------------ the agent, on its own
#
# src/drivers/session_agent.py is the session box's process. These run it as
# a plain process on a channel directory, to hold its protocol (what the
# service's relay takes) to the letter.

AGENT = os.path.join(os.path.dirname(__file__), "..", "..", "src", "drivers", "session_agent.py")


class Agent:
    """The agent on a channel directory, its stdout read as the service's
    relay reads it: each line a call's output or end, nothing else."""

    def __init__(self, tmp):
        self.channel = tmp / "session"
        (self.channel / "req").mkdir(parents=True)
        self.mark = f"airlock-agent-test-{uuid.uuid4().hex}"
        self.n = 0
        self.lines, self.ends, self.cv = {}, {}, threading.Condition()
        env = {**os.environ, "AIRLOCK_SESSION_CHANNEL": str(self.channel), "AIRLOCK_AGENT_TEST": self.mark}
        self.proc = subprocess.Popen([sys.executable, AGENT], env=env, stdout=subprocess.PIPE,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            doc = json.loads(line)
            with self.cv:
                if "end" in doc:
                    assert set(doc) == {"call", "end"} and doc["call"] not in self.ends, doc
                    self.ends[doc["call"]] = doc["end"]
                else:
                    assert set(doc) == {"call", "type", "data_base64"} and doc["type"] in ("stdout", "stderr"), doc
                    assert doc["call"] not in self.ends, ("output after its end", doc)
                    assert len(base64.b64decode(doc["data_base64"])) <= 48 << 10, "a line over CHUNK"
                    self.lines.setdefault(doc["call"], []).append(doc)
                self.cv.notify_all()

    def call(self, kind, code, timeout_ms=10000, wait=15):
        self.n += 1
        cid = f"run_{self.n}"
        req = self.channel / "req" / f"{cid}.json"
        tmp = self.channel / "req" / f".{cid}.tmp"
        tmp.write_text(json.dumps({"id": cid, "kind": kind, "code": code, "env": {}, "cwd": str(self.channel),
                                   "timeout_ms": timeout_ms, "mark": self.mark}))
        os.rename(tmp, req)
        with self.cv:
            assert self.cv.wait_for(lambda: cid in self.ends or self.proc.poll() is not None, wait), \
                f"{cid} did not end"
            assert cid in self.ends, "the agent died"
            end, lines = self.ends[cid], list(self.lines.get(cid, []))
        out = {"stdout": b"", "stderr": b"", "results": []}
        for doc in lines:
            out[doc["type"]] += base64.b64decode(doc["data_base64"])
        # a cell's results: stdout lines behind the mark, as python.py's
        kept = []
        for line in out["stdout"].decode().splitlines(keepends=True):
            if line.startswith(self.mark):
                out["results"].append(json.loads(line[len(self.mark):]))
            else:
                kept.append(line)
        out["stdout"] = "".join(kept).encode()
        return end, out

    def processes(self):
        """The pids of every process this agent started (its environment's mark)."""
        pids = []
        for p in os.listdir("/proc"):
            try:
                if p.isdigit() and self.mark.encode() in open(f"/proc/{p}/environ", "rb").read():
                    pids.append(int(p))
            except OSError:
                pass
        return pids

    def stop(self):
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


@pytest.fixture
def agent(tmp_path):
    a = Agent(tmp_path)
    yield a
    a.stop()


def test_the_agent_keeps_a_cells_names_for_the_next(agent):
    end, out = agent.call("python", "x = 1\nprint('set')")
    assert end == {"exit": 0, "timed_out": False} and out["stdout"] == b"set\n", (end, out)
    end, out = agent.call("python", "x + 1")
    assert end["exit"] == 0 and out["results"] == [{"type": "result", "text": "2", "is_main_result": True}], out
    end, out = agent.call("python", "y")
    assert end["exit"] == 1 and out["results"][0]["name"] == "NameError", out


def test_a_background_command_outlives_its_call_and_a_timeout_kills_only_its_call(agent):
    end, out = agent.call("bash", "sleep 60 >/dev/null 2>&1 & echo $!")
    assert end == {"exit": 0, "timed_out": False}, (end, out)
    bg = int(out["stdout"])
    end, out = agent.call("bash", f"kill -0 {bg} && echo alive; echo oops >&2; exit 3")
    assert end["exit"] == 3 and out["stdout"] == b"alive\n" and out["stderr"] == b"oops\n", (end, out)
    t0 = time.monotonic()
    end, out = agent.call("bash", "echo before; sleep 60; echo after", timeout_ms=500)
    assert end == {"exit": -1, "timed_out": True} and out["stdout"] == b"before\n", (end, out)
    assert time.monotonic() - t0 < 5
    end, out = agent.call("bash", f"kill -0 {bg} && echo still-alive")
    assert out["stdout"] == b"still-alive\n", (end, out)


def test_a_cell_past_its_timeout_loses_the_namespace_and_the_next_cell_says_so(agent):
    agent.call("python", "x = 41")
    end, _ = agent.call("python", "import time\ntime.sleep(60)", timeout_ms=500)
    assert end == {"exit": -1, "timed_out": True}, end
    end, out = agent.call("python", "x")
    assert end["exit"] == 1 and out["results"][0]["name"] == "NameError", out
    assert b"restarted" in out["stderr"] and b"variables are gone" in out["stderr"], out
    end, out = agent.call("python", "x = 1\nx + 1")
    assert out["results"][0]["text"] == "2", out


def test_a_command_killed_by_a_signal_ends_minus_one_saying_so(agent):
    end, out = agent.call("bash", "kill -9 $$")
    assert end == {"exit": -1, "timed_out": False} and out["stderr"] == b"airlock: the command was killed by " \
        b"signal 9\n", (end, out)
    end, out = agent.call("bash", "echo next")
    assert end["exit"] == 0 and out["stdout"] == b"next\n", (end, out)


def test_a_large_output_is_cut_into_lines_the_relay_takes(agent):
    end, out = agent.call("python", "print('x' * 200000)")
    assert end["exit"] == 0 and out["stdout"] == b"x" * 200000 + b"\n", (end, len(out["stdout"]))
    end, out = agent.call("bash", "head -c 300000 /dev/zero | tr '\\0' y")
    assert end["exit"] == 0 and out["stdout"] == b"y" * 300000, (end, len(out["stdout"]))
