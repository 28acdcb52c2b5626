"""The warm start for Python (src/lang/warm/python.py), held to a cold one:
each script of a corpus runs as `python3 main.py ARGS` (cold) and through
the warm start's protocol (the launcher as main.py, preloads imported, the
run's code, arguments, environment and stdin handed over on fd WARM_FD), and the
two must give the same stdout, stderr, exit status and files. This is the
interpreter's half of the warm pool (issue 14): it runs here on the host's
python3, where the box's is the image's."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from service_util import WARM_FD

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "src" / "lang" / "warm" / "python.py"
PY = "/usr/bin/python3"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
PRELOAD = "json,decimal,fractions,statistics,csv,email.message"

CORPUS = {
    "hello": "print('hello')",
    "argv_large": "import sys, hashlib\nprint(len(sys.argv), hashlib.sha256('\\0'.join(sys.argv[1:]).encode()).hexdigest())",
    "name_and_file": "print(__name__, __file__, __spec__, type(__loader__).__name__, __package__)",
    "namespace": "print(sorted(k for k in globals() if k != '__builtins__'))",
    "namespace_dir": "print(sorted(dir()))",
    "docstring": '"""The doc."""\nprint(__doc__)',
    "argv": "import sys; print(sys.argv, sys.orig_argv[1:])",
    "cwd_and_path": "import os, sys; print(os.getcwd() == os.path.dirname(__file__), sys.path[0] == os.getcwd())",
    "stdin": "import sys; print(repr(sys.stdin.read()), sys.stdin is sys.__stdin__)",
    "stdin_lines": "import sys\nfor line in sys.stdin: print(len(line))",
    "env": "import os; print(sorted(os.environ.items()))",
    # the environment a program the run starts gets (the C one, in its order)
    "env_child": "import subprocess; print(subprocess.run(['env'], capture_output=True, text=True).stdout, end='')",
    "exit_int": "import sys; print('x'); sys.exit(3)",
    "exit_str": "import sys; sys.exit('bye now')",
    "exit_none": "import sys; sys.exit()",
    "os_exit": "import os, sys; print('a', flush=True); sys.stdout.write('lost'); os._exit(7)",
    "uncaught": "def f():\n    raise ValueError('boom')\ndef g():\n    f()\ng()",
    "uncaught_chained": "try:\n    1/0\nexcept ZeroDivisionError as e:\n    raise KeyError('k') from e",
    "keyboard_interrupt": "raise KeyboardInterrupt",
    "syntax_error": "x = = 1",
    "syntax_error_late": "print('never')\ndef f(:\n    pass",
    "signal": "import os, signal; print('up', flush=True); os.kill(os.getpid(), signal.SIGTERM)",
    "atexit": "import atexit\natexit.register(lambda: print('at exit'))\nprint('body')",
    "atexit_after_error": "import atexit\natexit.register(lambda: print('at exit'))\nraise RuntimeError('r')",
    "excepthook": ("import sys\nsys.excepthook = lambda t, v, tb: print('hooked', t.__name__, v)\n"
                   "raise OSError('o')"),
    "traceback_module": "import traceback\ntry:\n    1/0\nexcept Exception:\n    traceback.print_exc()",
    "warnings": "import warnings; warnings.warn('careful')",
    "main_guard_fork": ("import multiprocessing as mp\ndef sq(x):\n    return x * x\n"
                        "if __name__ == '__main__':\n    mp.set_start_method('fork')\n"
                        "    with mp.Pool(2) as p:\n        print(p.map(sq, [1, 2, 3]))"),
    "main_guard_spawn": ("import multiprocessing as mp\ndef sq(x):\n    return x * x\n"
                         "if __name__ == '__main__':\n    mp.set_start_method('spawn')\n"
                         "    with mp.Pool(2) as p:\n        print(p.map(sq, [1, 2, 3]))"),
    "pickle_main_class": ("import pickle\nclass P:\n    pass\nprint(type(pickle.loads(pickle.dumps(P()))).__module__)"),
    "reimport_preloaded": "import importlib, json\njson = importlib.reload(json)\nprint(json.dumps({'a': 1}))",
    "sys_path_change": "import sys; sys.path.insert(0, '/nonexistent'); import csv; print(csv.__name__)",
    "write_file": "open('written.txt', 'w').write('data')",
    "non_utf8_output": "import sys; sys.stdout.buffer.write(b'\\xff\\xfe\\x00'); sys.stdout.flush()",
    "stderr": "import sys; print('to err', file=sys.stderr)",
    "threads_at_exit": ("import threading, time\ndef w():\n    time.sleep(0.2); print('thread done')\n"
                        "threading.Thread(target=w).start()\nprint('main done')"),
    "coding_cookie": "# -*- coding: latin-1 -*-\nprint(len('\xe9'))",
    # what the interpreter's end does, which a warm start does without its
    # module teardown
    "file_left_open": "f = open('left.txt', 'w'); f.write('unflushed data')",
    "file_left_open_nested": "class H:\n    pass\nh = H(); h.f = open('nested.txt', 'wb'); h.f.write(b'x' * 10)",
    "del_at_exit": "class D:\n    def __del__(self):\n        print('deleted')\nd = D()\nprint('body')",
    "weakref_finalize": "import weakref\nclass O:\n    pass\no = O()\nweakref.finalize(o, print, 'finalized')",
    "logging_at_exit": "import logging\nlogging.basicConfig(filename='log.txt')\nlogging.warning('w')",
    "exit_in_thread_join": ("import threading, sys, time\ndef w():\n    time.sleep(0.2); print('late')\n"
                            "threading.Thread(target=w).start()\nsys.exit(5)"),
    "exit_big": "import sys; sys.exit(256 + 7)",
    "exit_object": "import sys; sys.exit(['not', 'a', 'code'])",
    "stdout_unflushed": "import sys; sys.stdout.write('no newline')",
    # the hand-off socket is gone: the script's first open is a cold one's
    "fds": "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')), os.open('/dev/null', os.O_RDONLY))",
}
ARGS = {"argv": ["one", "two words", "-x"], "main_guard_fork": [],
        # a hand-off larger than a socket's buffer: read in more than one go
        "argv_large": ["%03d" % i + "\u00e9" * 1998 for i in range(256)]}
STDIN = {"stdin": b"line one\nline two\n", "stdin_lines": b"a\nbb\nccc\n"}
BYTES = {"coding_cookie": "# -*- coding: latin-1 -*-\nprint(len('\xe9'))".encode("latin-1")}


def script_bytes(name):
    return BYTES.get(name, CORPUS[name].encode())


def outcome(p, out, err, d):
    skip = ("main.py", "stdin.txt", "__pycache__")
    files = sorted((f.name, f.read_bytes()) for f in d.iterdir() if f.name not in skip and f.is_file())
    return {"status": p.returncode, "stdout": out, "stderr": err, "files": files}


def stdin_file(d, name):
    if name not in STDIN:
        return subprocess.DEVNULL
    (d / "stdin.txt").write_bytes(STDIN[name])
    return open(d / "stdin.txt", "rb")


def cold(name, d):
    (d / "main.py").write_bytes(script_bytes(name))
    p = subprocess.Popen([PY, "main.py", *ARGS.get(name, [])], cwd=d, env=ENV, stdin=stdin_file(name=name, d=d),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=60)
    return outcome(p, out, err, d)


def warm_message(args, env):
    """The hand-off's message as the box's parent writes it (src/box/box.c,
    warm_message): its length and a newline, then NUL-terminated strings,
    the number of arguments, the arguments, the environment."""
    body = b"".join(os.fsencode(s) + b"\0" for s in [str(len(args)), *args, *env])
    return b"%d\n" % len(body) + body


def warm(name, d, files=None, ack=b"g"):
    """The warm start's run of NAME in D, with FILES (name: bytes) staged
    beside it at the hand-off; it answers ACK ('c': run it cold)."""
    shutil.copy(LAUNCHER, d / "main.py")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    # the child's only fd beyond stdio is the socket, at WARM_FD as in a box
    # (put there in this process first: pass_fds takes only open fds)
    try:
        os.fstat(WARM_FD)
        raise AssertionError(f"fd {WARM_FD} of the test process is taken")
    except OSError:
        pass
    os.dup2(theirs.fileno(), WARM_FD)
    theirs.close()
    try:
        p = subprocess.Popen([PY, "main.py"], cwd=d, env=dict(ENV, AIRLOCK_PRELOAD=PRELOAD, AIRLOCK_WARM_FD=str(WARM_FD)),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             pass_fds=(WARM_FD,))
    finally:
        os.close(WARM_FD)
    # ready: preloads imported, waiting for its run
    assert ours.recv(1) == b"r"
    (d / "main.py.new").write_bytes(script_bytes(name))
    os.replace(d / "main.py.new", d / "main.py")
    for fname, data in (files or {}).items():
        (d / fname).parent.mkdir(exist_ok=True)
        (d / fname).write_bytes(data)
    msg = warm_message(ARGS.get(name, []), [f"{k}={v}" for k, v in ENV.items()])
    f = stdin_file(d, name)
    # a large one in two parts, the second a moment later (as a sender
    # the socket's buffer holds up): the warm start reads until it has all
    # (one read cut it, before: its parse failed, as the run's error)
    first = msg if len(msg) <= 1 << 16 else msg[:1 << 16]
    socket.send_fds(ours, [first], [f.fileno()] if f is not subprocess.DEVNULL else [])
    if len(first) < len(msg):
        time.sleep(0.2)
        ours.sendall(msg[len(first):])
    if f is not subprocess.DEVNULL:
        f.close()
    # it says it has the run before any of the run's code
    assert ours.recv(1) == ack
    ours.close()
    out, err = p.communicate(timeout=60)
    return outcome(p, out, err, d)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_warm_is_cold(name, tmp_path):
    a, b = tmp_path / "cold", tmp_path / "warm"
    a.mkdir()
    b.mkdir()
    want = cold(name, a)
    got = warm(name, b)
    # the directories differ by name only: the run's view of itself is its
    # own directory, which the box makes /work for both
    got["stdout"] = got["stdout"].replace(str(b).encode(), str(a).encode())
    got["stderr"] = got["stderr"].replace(str(b).encode(), str(a).encode())
    assert got == want


def test_the_one_known_difference_is_two_frames_of_stack(tmp_path):
    # the run's code runs from the warm start's module frame (through
    # exec), so its stack starts deeper: a recursion that meets the limit
    # meets it two calls sooner. Everything else of the traceback is equal.
    import re
    CORPUS["_deep"] = "import sys\ndef f(n):\n    return f(n + 1)\nsys.setrecursionlimit(100)\nf(0)"
    try:
        (tmp_path / "c").mkdir()
        (tmp_path / "w").mkdir()
        a, b = cold("_deep", tmp_path / "c"), warm("_deep", tmp_path / "w")
    finally:
        del CORPUS["_deep"]
    rep = re.compile(rb"\[Previous line repeated (\d+) more times\]")
    assert int(rep.search(a["stderr"]).group(1)) - int(rep.search(b["stderr"]).group(1)) == 2
    norm = lambda r, d: rep.sub(b"", r["stderr"].replace(str(d).encode(), b"D"))  # noqa: E731
    assert norm(a, tmp_path / "c") == norm(b, tmp_path / "w") and a["status"] == b["status"] == 1


def test_the_corpus_sees_what_it_should_cold(tmp_path):
    # the corpus is not vacuous: cold runs end as the scripts say
    r = {n: cold(n, (tmp_path / n).resolve()) for n in CORPUS if (tmp_path / n).mkdir() is None}
    assert r["exit_int"]["status"] == 3 and r["os_exit"]["status"] == 7 and r["exit_str"]["stderr"] == b"bye now\n"
    assert r["signal"]["status"] == -signal.SIGTERM and r["keyboard_interrupt"]["status"] == -signal.SIGINT
    assert b"ValueError: boom" in r["uncaught"]["stderr"] and r["uncaught"]["status"] == 1
    assert b"SyntaxError" in r["syntax_error"]["stderr"] and r["syntax_error_late"]["stdout"] == b""
    assert r["atexit_after_error"]["stdout"] == b"at exit\n" and r["write_file"]["files"] == [("written.txt", b"data")]
    assert r["main_guard_spawn"]["stdout"] == b"[1, 4, 9]\n" and r["pickle_main_class"]["stdout"] == b"__main__\n"
    assert b"'one', 'two words', '-x'" in r["argv"]["stdout"]


def test_a_warm_start_has_imported_its_preloads_before_the_run(tmp_path):
    # the point of it: the run finds them in sys.modules, paid for before it
    CORPUS_PROBE = "import sys; print(all(m in sys.modules for m in %r))" % PRELOAD.split(",")
    CORPUS["_probe"] = CORPUS_PROBE
    try:
        (tmp_path / "c").mkdir()
        (tmp_path / "w").mkdir()
        assert cold("_probe", tmp_path / "c")["stdout"] == b"False\n"
        assert warm("_probe", tmp_path / "w")["stdout"] == b"True\n"
    finally:
        del CORPUS["_probe"]


SHADOW = "import json, decimal, fractions\nprint(json.__file__, decimal.__file__, fractions.__file__)"


@pytest.mark.parametrize("files", [
    {"json.py": b"print('own json')"},                  # a preload
    {"decimal.py": b"print('own decimal')"},            # a preload
    {"fractions/__init__.py": b"print('own fractions')"},  # a preload, as a package
    {"statistics.pyc": b"not even byte code"},          # a preload, sourceless
])
def test_a_run_whose_files_shadow_a_loaded_module_is_sent_cold(tmp_path, files):
    # cold, the script's own directory comes first on sys.path, so its
    # json.py is what `import json` gets; warm, json is loaded already.
    # Such a run is not taken ('c'): it goes cold, and none of its code
    # ran in the warm box
    CORPUS["_shadow"] = SHADOW
    try:
        (tmp_path / "w").mkdir()
        got = warm("_shadow", tmp_path / "w", files, ack=b"c")
    finally:
        del CORPUS["_shadow"]
    assert got["status"] == 0 and got["stdout"] == b"" and got["stderr"] == b"", got


def test_a_run_whose_files_shadow_nothing_loaded_is_taken(tmp_path):
    # a data file named after a module, a module of the run's own that
    # nothing loaded, and a file named after a module built into every
    # CPython (gc, which the warm start imports: found before the script's
    # directory is looked in, cold or warm): warm as cold
    CORPUS["_own"] = ("import mine, json, gc\n"
                      "print(mine.X, open('json.csv').read(), json.__name__, hasattr(gc, 'WHO'))")
    files = {"mine.py": b"X = 42", "json.csv": b"a,b", "gc.py": b"WHO = 1"}
    try:
        for d in ("c", "w"):
            (tmp_path / d).mkdir()
        for f, data in files.items():
            (tmp_path / "c" / f).write_bytes(data)
        want = cold("_own", tmp_path / "c")
        got = warm("_own", tmp_path / "w", files)
    finally:
        del CORPUS["_own"]
    assert got == want and want["stdout"] == b"42 a,b json False\n", (got, want)
