"""The Piston-compatible API (issue 7, part): code written against Piston's
public API works by changing its base URL to /piston/<api key>."""
import json
import urllib.request

from service_util import service  # noqa: F401


def call(svc, path, body=None, key=None):
    url = f"http://127.0.0.1:{svc.port}/piston/{key or svc.key}/api/v2/{path}"
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 method="POST" if body is not None else "GET")
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


def test_execute_timeout_is_a_signal(service):
    status, doc = call(service, "execute", {"language": "js", "version": "*",
                                            "files": [{"content": "while (true) {}"}], "run_timeout": 1000})
    assert status == 200
    assert doc["language"] == "javascript"
    assert doc["run"]["signal"] == "SIGKILL" and doc["run"]["code"] is None
    assert doc["airlock_state"] == "timed_out"


def test_execute_errors(service):
    assert call(service, "execute", {"language": "cobol", "files": [{"content": "x"}]})[0] == 400
    assert call(service, "execute", {"language": "python", "files": []})[0] == 400
    assert call(service, "runtimes", key="al_wrong")[0] == 401
