# The E2B session box's agent (issue 35; docs/api.md "Session box").
#
# The process of a sandbox's session box (core/session_box.c embeds this
# file and writes it into the box's channel, bound read-only at /skill):
# it runs each call the service submits. tests/integration/
# test_e2b_session.py runs it in the service and as a plain process.
#
# The channel: requests come in as files, output goes out as lines on the
# agent's stdout (the box never writes the shared STATE; core/
# sandbox_session.h says why):
#
#   req/ID.json   the box's /run/airlock-session/req, written by the service
#                 (write aside, rename), bound read-only: code in the box
#                 cannot change a later call's approved code.
#                 {"id", "kind": "bash"|"python", "code", "env", "cwd",
#                  "timeout_ms", "mark"}
#   stdout        one JSON line each, written whole under one lock:
#                 {"call": ID, "type": "stdout"|"stderr", "data_base64"}
#                 a call's output (a cell's results are stdout lines
#                 "<mark><JSON>" as src/api/e2b_cells/python.py emits them),
#                 each line's data at most CHUNK bytes;
#                 {"call": ID, "end": {"exit": N, "timed_out": bool, "error"?}}
#                 its end, once.
#
# The service relays these into STATE/sandboxes/ID/session/out/ (core/
# sandbox_session.c, al_session_relay_feed), only for calls it submitted,
# within caps; whoever runs the call follows them there, on any node.
# Whether the box lives is the service's to know (it holds the box's
# process), not the agent's word.
#
# Commands run as `bash -l -c CODE` in a process group of their own: the
# call ends when bash exits (a background child goes on, holding nothing
# of the call's: its output after the call ends is dropped), and a call
# past its timeout has its group killed, nothing else. Cells run in one
# Python worker process whose namespace persists between cells; a cell past
# its timeout kills the worker (its state is lost, and the next cell says
# so), never the agent or the commands.
import base64
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

# its own directory: the session box binds it read-only at /skill, the
# agent and req/ beside it (the bind a skill's bundle has: live, so a
# request written after the box started is seen)
CHANNEL = os.environ.get("AIRLOCK_SESSION_CHANNEL", os.path.dirname(os.path.abspath(__file__)))
REQ_MAX = 4 << 20           # a request the agent reads at most (the service's code cap is 1 MiB)
CHUNK = 48 << 10            # a line's data at most: its base64 and JSON stay under the relay's 96 KiB line
POLL_S = 0.05

_OUT_LOCK = threading.Lock()


def _emit(doc):
    """One line on the agent's stdout, whole (os.write loops on a short write)."""
    data = (json.dumps(doc) + "\n").encode()
    with _OUT_LOCK:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]


class Log:
    """A call's output lines, put by its readers' threads; closed, it drops
    what a background child writes after its call ended."""

    def __init__(self, call):
        self.call = call
        self.lock = threading.Lock()
        self.open = True

    def put(self, doc):
        data = base64.b64decode(doc["data_base64"])
        with self.lock:
            if not self.open:
                return
            for at in range(0, len(data), CHUNK):
                _emit({"call": self.call, "type": doc["type"],
                       "data_base64": base64.b64encode(data[at:at + CHUNK]).decode()})

    def close(self):
        with self.lock:
            self.open = False

    def end(self, end):
        self.close()
        _emit({"call": self.call, "end": end})


class _Pump(threading.Thread):
    """One of a call's pipes read to its end; busy while a chunk it read is
    not yet put, so the call's end waits for it."""

    def __init__(self, pipe, stream, log):
        super().__init__(daemon=True)
        self.pipe, self.stream, self.log = pipe, stream, log
        self.busy = False

    def run(self):
        while True:
            chunk = os.read(self.pipe.fileno(), 65536)
            if not chunk:
                return
            self.busy = True
            self.log.put(_chunk(self.stream, chunk))
            self.busy = False

    def drain(self, until):
        """Wait while what the command wrote is being read: the pipe has
        bytes (or its end) to read, or a chunk is being put. A background
        child that holds the pipe open and writes nothing does not hold the
        call; the load of the machine does not lose its output (a fixed
        0.2 s wait did, under CI's load)."""
        while self.is_alive() and time.monotonic() < until:
            ready, _, _ = select.select([self.pipe], [], [], 0)
            if not ready and not self.busy:
                return
            self.join(0.02)


def _chunk(stream, data):
    return {"type": stream, "data_base64": base64.b64encode(data).decode()}


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


_CALLS = {}                 # call id -> the pid of its process group (bash, node), or "cells"
_CANCELED = set()           # calls canceled before they had a process (killed as they get one)
_CALLS_LOCK = threading.Lock()


def run_process(req, log, argv):
    env = dict(os.environ)
    env.update(req.get("env") or {})
    p = subprocess.Popen(argv, cwd=req.get("cwd") or None, env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    with _CALLS_LOCK:
        _CALLS[req.get("id")] = p.pid
        canceled = req.get("id") in _CANCELED
    if canceled:
        _kill_group(p.pid)
    pumps = [_Pump(pipe, name, log) for pipe, name in ((p.stdout, "stdout"), (p.stderr, "stderr"))]
    for t in pumps:
        t.start()
    timeout = (req.get("timeout_ms") or 0) / 1000 or None
    try:
        code = p.wait(timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(p.pid)
        code = p.wait()
        timed_out = True
    with _CALLS_LOCK:
        _CALLS.pop(req.get("id"), None)
    # a background child may hold the pipes: what it writes later is not the
    # call's; what the command wrote is read within a moment
    until = time.monotonic() + 10
    for t in pumps:
        t.join(0.05)
        t.drain(until)
    if timed_out or code >= 0:
        return {"exit": -1 if timed_out else code, "timed_out": timed_out}
    # killed by a signal (its own kill, the OOM killer's, a cancel): envd's
    # exit -1, said on its stderr (an "error" is the call's own failure)
    log.put(_chunk("stderr", f"airlock: the command was killed by signal {-code}\n".encode()))
    return {"exit": -1, "timed_out": False}


def run_bash(req, log):
    return run_process(req, log, ["bash", "-l", "-c", req["code"]])


def run_node(req, log):
    """A javascript cell: its run's code (the cell driver) as a script of
    its own; no state is kept between javascript cells."""
    path = f"/tmp/.airlock-cell-{req.get('id')}.js"
    with open(path, "w") as f:
        f.write(req["code"])
    try:
        return run_process(req, log, ["node", path])
    finally:
        os.unlink(path)


def cancel(call, cells):
    """The call's process group killed (a python cell: the interpreter)."""
    with _CALLS_LOCK:
        pid = _CALLS.get(call)
        if pid is None:
            _CANCELED.add(call)
    if pid == "cells":
        cells.kill()
    elif pid:
        _kill_group(pid)


def cell_of(req):
    """A python cell's code, environment and mark: the run's code is
    src/api/e2b_cells/python.py under the line _AIRLOCK = "<base64 of
    JSON>" (the run's code stays what was approved); a request without
    that line is a cell of its own."""
    import re
    m = re.search(r'^_AIRLOCK = "([A-Za-z0-9+/=]+)"$', req["code"], re.M)
    if not m:
        return req["code"], req.get("env") or {}, req.get("mark", "")
    a = json.loads(base64.b64decode(m.group(1)))
    return a["cell"], a.get("env") or {}, a.get("mark", "")


class Cells:
    """One Python worker whose namespace outlives its cells."""

    def __init__(self):
        self.p = None
        self.lost = False
        # one cell at a time, as a notebook's kernel: a second waits
        self.lock = threading.Lock()

    def start(self):
        self.p = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--cells"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        # one reader of the worker's stderr for its life, into the call's log
        self.log = None
        threading.Thread(target=self._stderr, args=(self.p.stderr,), daemon=True).start()

    def _stderr(self, pipe):
        for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
            log = self.log
            if log:
                log.put(_chunk("stderr", chunk))

    def run(self, req, log):
        with self.lock:
            with _CALLS_LOCK:
                _CALLS[req.get("id")] = "cells"
            try:
                return self._run(req, log)
            finally:
                with _CALLS_LOCK:
                    _CALLS.pop(req.get("id"), None)

    def kill(self):
        p = self.p
        if p is not None:
            _kill_group(p.pid)

    def _run(self, req, log):
        if self.p is None or self.p.poll() is not None:
            self.lost = self.p is not None
            self.start()
        if self.lost:
            log.put(_chunk("stderr", b"airlock: the session's Python interpreter was restarted (an earlier cell "
                                     b"was killed): its variables are gone, files under /home/user are kept\n"))
            self.lost = False
        done = threading.Event()
        result = {}

        def out():
            for line in iter(self.p.stdout.readline, b""):
                doc = json.loads(line)
                if "done" in doc:
                    result.update(doc["done"])
                    done.set()
                    return
                log.put(doc)
            done.set()

        self.log = log
        reader = threading.Thread(target=out, daemon=True)
        reader.start()
        code, env, mark = cell_of(req)
        self.p.stdin.write((json.dumps({"code": code, "env": env, "cwd": req.get("cwd"), "mark": mark}) + "\n")
                           .encode())
        self.p.stdin.flush()
        timeout = (req.get("timeout_ms") or 0) / 1000 or None
        if not done.wait(timeout):
            _kill_group(self.p.pid)
            self.p.wait()
            self.lost = True
            return {"exit": -1, "timed_out": True}
        reader.join(1)
        if not result:
            self.lost = True
            code = self.p.wait()
            how = "by the box's memory limit, most likely" if code == -9 else f"exit status {code}"
            return {"exit": -1, "timed_out": False,
                    "error": f"the session's Python interpreter died ({how}); its variables are gone, "
                             "the next cell starts a new one"}
        return {"exit": result.get("exit", 0), "timed_out": False}


def worker():
    """--cells: read a cell a line, run it in the one namespace, answer
    with chunks and a "done" line on stdout (the agent's pipe)."""
    import ast
    import io
    import traceback
    proto = os.fdopen(os.dup(1), "w", buffering=1)

    class Chunks(io.TextIOBase):
        def __init__(self, name):
            self.name = name

        def write(self, s):
            if s:
                proto.write(json.dumps(_chunk(self.name, s.encode())) + "\n")
            return len(s)

    g = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in sys.stdin:
        req = json.loads(line)
        os.environ.update(req["env"])
        if req.get("cwd"):
            os.chdir(req["cwd"])
        sys.stdout, sys.stderr = Chunks("stdout"), Chunks("stderr")

        def emit(doc):
            # a result as the cell driver's: a stdout line behind the call's mark
            proto.write(json.dumps(_chunk("stdout", (req["mark"] + json.dumps(doc) + "\n").encode())) + "\n")
        failed = False
        try:
            tree = ast.parse(req["code"], "<cell>", "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, "<cell>", "exec"), g)
            value = eval(compile(last, "<cell>", "eval"), g) if last is not None else None
            if value is not None:
                t = repr(value)
                if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
                    t = t[1:-1]
                emit({"type": "result", "text": t, "is_main_result": True})
        except BaseException as e:  # noqa: B902 (a cell's SystemExit is its error)
            failed = True
            emit({"type": "error", "name": type(e).__name__, "value": str(e),
                  "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))})
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        proto.write(json.dumps({"done": {"exit": 1 if failed else 0}}) + "\n")


def serve():
    req_dir = os.path.join(CHANNEL, "req")
    seen, cells = set(), Cells()
    while True:
        # a call's request before its cancel, when both are there
        names = sorted((n for n in os.listdir(req_dir) if n not in seen and not n.startswith(".")),
                       key=lambda n: (n.endswith(".cancel"), n))
        for name in names:
            call, _, ext = name.rpartition(".")
            if ext == "cancel":
                seen.add(name)
                cancel(call, cells)
                continue
            if ext != "json":
                continue
            seen.add(name)
            log = Log(call)
            try:
                with open(os.path.join(req_dir, name), "rb") as f:
                    req = json.loads(f.read(REQ_MAX + 1)[:REQ_MAX])
                req["id"] = call
            except (OSError, ValueError) as e:
                log.end({"exit": -1, "timed_out": False, "error": f"bad request: {e}"})
                continue
            threading.Thread(target=one_call, args=(req, log, cells), daemon=True).start()
        time.sleep(POLL_S)


def one_call(req, log, cells):
    try:
        kind = req.get("kind")
        end = cells.run(req, log) if kind == "python" else run_node(req, log) if kind == "node" else \
            run_bash(req, log)
    except Exception as e:  # noqa: B902 (whatever failed, the call ends and says why)
        end = {"exit": -1, "timed_out": False, "error": f"{type(e).__name__}: {e}"}
    log.end(end)


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["--cells"] else serve()
