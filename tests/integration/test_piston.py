"""The Piston-compatible API (issue 7, part): code written against Piston's
public API works by changing its base URL to /piston/<api key>."""
import json
import urllib.request

from service_util import service  # noqa: F401


def call(svc, path, body=None, key=None, method=None, raw=None):
    url = f"http://127.0.0.1:{svc.port}/piston/{key or svc.key}/api/v2/{path}"
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_runtimes(service):
    status, rts = call(service, "runtimes")
    assert status == 200
    by = {r["language"]: r for r in rts}
    assert set(by) == {"python", "javascript", "bash"}
    assert by["python"]["version"].startswith("3.") and "py" in by["python"]["aliases"]
    assert by["javascript"]["version"][0].isdigit()


def test_execute_with_files_stdin_and_args(service):
    status, doc = call(service, "execute", {
        "language": "python", "version": "3.10.0",
        "files": [{"name": "main.py", "content": "import sys\nprint(sys.argv[1:], sys.stdin.read().upper())\n"
                                                 "print(open('data.txt').read(), end='')\nsys.exit(3)"},
                  {"name": "data.txt", "content": "extra file\n"}],
        "stdin": "hello", "args": ["a", "b"], "run_timeout": 5000})
    assert status == 200, doc
    run = doc["run"]
    assert run["stdout"] == "['a', 'b'] HELLO\nextra file\n"
    assert run["output"] == run["stdout"] + run["stderr"]
    assert run["code"] == 3 and run["signal"] is None
    assert doc["language"] == "python" and doc["version"].startswith("3.")


def test_execute_timeout_is_a_signal_in_milliseconds(service):
    """run_timeout is milliseconds to the box's timer: 400 ms is not a
    second (it ran 1015 ms when it was rounded up to seconds)."""
    status, doc = call(service, "execute", {"language": "js", "version": "*",
                                            "files": [{"content": "while (true) {}"}], "run_timeout": 400})
    assert status == 200
    assert doc["language"] == "javascript"
    run = doc["run"]
    assert run["signal"] == "SIGKILL" and run["code"] is None
    assert run["status"] == "TO" and run["message"] == "Time limit exceeded (wall clock)"
    assert doc["airlock_state"] == "timed_out"
    assert 400 <= run["wall_time"] < 1000, run  # a second rounded up took 1015
    assert run["cpu_time"] >= 20, run  # it spun, on the CPU (node starting alone takes more)
    # the REST view of the same run: its limits in whole seconds as REST
    # has them (rounded up), its end at the milliseconds
    rest = service.get_run(doc["airlock_run_id"])
    assert rest["limits"]["timeout_s"] == 1 and rest["limits"]["timeout_ms"] == 400
    assert rest["result"]["reason"] == "timeout"


def test_statuses(service):
    """Piston's status and message of each end (isolate's codes and its
    own OL and EL), null when it exited 0, and the figures of each."""
    def run(lang, code, **kw):
        status, doc = call(service, "execute", dict({"language": lang, "version": "*",
                                                     "files": [{"content": code}]}, **kw))
        assert status == 200, doc
        return doc["run"]
    ok = run("python", "x = bytearray(30 << 20)\nprint('ok')")
    assert ok["status"] is None and ok["message"] is None and ok["code"] == 0
    assert isinstance(ok["cpu_time"], int) and isinstance(ok["wall_time"], int) and ok["wall_time"] >= ok["cpu_time"] // 2
    assert 30 << 20 <= ok["memory"] < 512 << 20, ok  # its 30 MiB, and far from the cap
    re_ = run("bash", "echo no >&2; exit 3")
    assert (re_["status"], re_["message"], re_["code"], re_["signal"]) == ("RE", "Exited with error status 3", 3, None)
    sg = run("bash", "kill -9 $$")
    assert (sg["status"], sg["message"], sg["code"], sg["signal"]) == ("SG", "Caught fatal signal 9", None, "SIGKILL")
    # over its memory limit: the kernel's SIGKILL, with airlock's reason
    oom = run("python", "x = bytearray(400 << 20)\nprint(len(x))", run_memory_limit=64 << 20)
    assert (oom["status"], oom["message"], oom["signal"]) == \
        ("SG", "Caught fatal signal 9 (memory limit exceeded)", "SIGKILL"), oom
    # past the box's output cap (1 MiB a stream): killed, and told which
    ol = run("python", "import sys\nsys.stdout.write('x' * (3 << 20))\nsys.stdout.flush()\nimport time; time.sleep(30)")
    assert (ol["status"], ol["message"], ol["signal"]) == ("OL", "stdout length exceeded", "SIGKILL"), ol["message"]
    assert len(ol["stdout"]) <= 1 << 20 and ol["wall_time"] < 20000
    el = run("python", "import sys\nsys.stderr.write('e' * (3 << 20))\nsys.stderr.flush()\nimport time; time.sleep(30)")
    assert (el["status"], el["message"], el["signal"]) == ("EL", "stderr length exceeded", "SIGKILL"), el["message"]


def test_packages(service):
    status, pkgs = call(service, "packages")
    assert status == 200
    by = {p["language"]: p for p in pkgs}
    assert set(by) == {"python", "javascript", "bash"} and all(p["installed"] is True for p in pkgs)
    _, rts = call(service, "runtimes")
    assert {r["language"]: r["version"] for r in rts} == {k: p["language_version"] for k, p in by.items()}
    for method in ("POST", "DELETE"):
        status, doc = call(service, "packages", {"language": "python", "version": "3.12.0"}, method=method)
        assert status == 405, doc
        assert "installs no packages" in doc["message"] and doc["error"]["code"] == "method_not_allowed"


def test_execute_errors(service):
    """Every error of the surface in Piston's shape: its message at the top."""
    def err(status, doc, want, words):
        assert status == want, doc
        assert isinstance(doc.get("message"), str) and words in doc["message"], doc
        assert doc["message"] == doc["error"]["message"]
    err(*call(service, "execute", {"language": "cobol", "files": [{"content": "x"}]}), 400, "want language")
    err(*call(service, "execute", {"language": "python", "files": []}), 400, "files[0].content")
    err(*call(service, "execute", raw=b"{not json"), 400, "JSON")
    err(*call(service, "execute", raw=b" " * (9 << 20)), 413, "too large")  # past body_max (8 MiB)
    err(*call(service, "runtimes", key="al_wrong"), 401, "API key")
    err(*call(service, "nothing"), 404, "Piston's API here")
    err(*call(service, "nothing/deeper"), 404, "no such path")
    err(*call(service, "runtimes", {}, method="PUT"), 404, "Piston's API here")
    # out of the workspace's bounds, in milliseconds, as the check words it
    err(*call(service, "execute", {"language": "python", "files": [{"content": "1"}], "run_timeout": 10**9}),
        400, "ms")
    # REST keeps its own shape
    req = urllib.request.Request(f"http://127.0.0.1:{service.port}/v1/runs", method="GET")
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("no key was asked")
    except urllib.error.HTTPError as e:
        doc = json.load(e)
        assert e.code == 401 and "message" not in doc and doc["error"]["code"] == "unauthorized"
