"""The E2B session box (issue 35): one box per sandbox holding interpreter
state and background commands between calls, behind the workspace setting
e2b_session_box. It is not built yet: the setting exists, shows false, and
true is refused saying so, never accepted and ignored; with it off (the only
state), a sandbox's calls are what they are today: each a fresh box, files
kept, processes not (docs/api.md, "Session box"). Below those, the agent
that would run inside the session box (src/drivers/session_agent.py, not
shipped), run as a plain process on its channel directory; the service's
side of the channel is tests/unit/test_sandbox_session.c's."""
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

from service_util import gov_tenant, service  # noqa: F401
from test_e2b_commands import create, start


def test_the_setting_shows_false_and_refuses_true(service):
    t = gov_tenant(service, "e2bsess")
    assert t.client.ok("GET", "/v1/settings")["e2b_session_box"] is False
    status, _, doc = t.client.request("PATCH", "/v1/settings", json={"e2b_session_box": True})
    assert status == 400 and "e2b_session_box" in doc["error"]["message"] and "not available yet" in doc["error"]["message"], \
        (status, doc)
    # refused whole: nothing else of that PATCH is written either
    status, _, doc = t.client.request("PATCH", "/v1/settings", json={"e2b_session_box": True, "timeout_s": 7})
    assert status == 400, (status, doc)
    for bad in ["yes", 1, None, []]:
        status, _, doc = t.client.request("PATCH", "/v1/settings", json={"e2b_session_box": bad})
        assert status == 400 and "e2b_session_box must be true or false" in doc["error"]["message"], (bad, status, doc)
    got = t.client.ok("PATCH", "/v1/settings", json={"e2b_session_box": False})
    assert got["e2b_session_box"] is False and got["timeout_s"] != 7, got
    assert t.client.ok("GET", "/v1/settings")["e2b_session_box"] is False


def _stdout(frames):
    return b"".join(base64.b64decode(json.loads(f)["event"]["data"]["stdout"])
                    for fl, f in frames if fl == 0 and b'"stdout"' in f)


def _bash(service, sid, token, script):
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", script]}})
    return _stdout(start(service, sid, token, body.encode()))


def test_with_the_setting_off_files_carry_over_and_processes_do_not(service):
    """Differential: the file a command wrote is read by the next; the
    background process it started is gone by then (its box ended with it),
    as the session box would change and, unbuilt, does not."""
    sid, token = create(service)
    out = _bash(service, sid, token, "sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo kept > note.txt; "
                "kill -0 $(cat bg.pid) && echo alive")
    assert out == b"alive\n", out
    out = _bash(service, sid, token, "cat note.txt; kill -0 $(cat bg.pid) 2>/dev/null && echo alive || echo gone")
    assert out == b"kept\ngone\n", out
    assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204


# ------------------------------------------------------------ the agent, on its own
#
# src/drivers/session_agent.py is the part of the session box that would run
# inside it. Nothing ships it yet; these run it as a plain process on a
# channel directory, as the box would, to hold its protocol to what the
# service side will be built against.

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
    end, _ = agent.call("bash", "kill -9 $$")
    assert end == {"exit": -1, "timed_out": False, "error": "killed by signal 9"}, end
    end, out = agent.call("bash", "echo next")
    assert end["exit"] == 0 and out["stdout"] == b"next\n", (end, out)


def test_a_large_output_is_cut_into_lines_the_relay_takes(agent):
    end, out = agent.call("python", "print('x' * 200000)")
    assert end["exit"] == 0 and out["stdout"] == b"x" * 200000 + b"\n", (end, len(out["stdout"]))
    end, out = agent.call("bash", "head -c 300000 /dev/zero | tr '\\0' y")
    assert end["exit"] == 0 and out["stdout"] == b"y" * 300000, (end, len(out["stdout"]))
