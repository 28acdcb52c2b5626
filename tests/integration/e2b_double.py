"""An E2B-compatible HTTP endpoint for the e2b driver's tests: a TEST DOUBLE
of the remote E2B service (its control plane and the envd of its
sandboxes), never a service to expose, and not the E2B-compatible API of
airlock itself (src/api/e2b*.c), which test_driver_e2b.py prefers when the
build has it. It serves what the e2b driver calls, in the shapes the e2b
SDK 2.51.0 uses (/work/shared/research/e2b-wire.md):

  control plane, X-API-KEY
    POST   /v2/sandboxes   {templateID, timeout, metadata, ...} -> 201 {sandboxID, envdAccessToken, envdVersion}
    GET    /v2/sandboxes   [{sandboxID, metadata, ...}]
    DELETE /sandboxes/{id} 204; 404 {"code": 404, "message"} when unknown
  envd (every sandbox at the same URL, as E2B_SANDBOX_URL), E2b-Sandbox-Id + X-Access-Token
    POST /files?path=P (multipart, part "file"), GET /files?path=P
    POST /filesystem.Filesystem/MakeDir, /filesystem.Filesystem/ListDir (Connect unary, JSON)
    POST /process.Process/Start (Connect server stream, JSON envelopes: start, data, end, end-stream),
         Connect-Timeout-Ms honoured (deadline_exceeded); /process.Process/SendSignal

A sandbox is daytona_double's: a directory tree in which each command runs
chroot'ed in a private mount namespace, as root (the suite runs as root): it
is not a sandbox. Every request is logged in `.requests`.
"""
import base64
import json
import os
import posixpath
import secrets
import signal
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from daytona_double import _ENTER, PATH, Fail, Sandbox, parse_multipart

MAX_BODY = 64 << 20


def envelope(flags, doc):
    data = json.dumps(doc).encode()
    return struct.pack(">BI", flags, len(data)) + data


def entry_of(host, path):
    st = os.lstat(host)
    kind = "FILE_TYPE_DIRECTORY" if os.path.isdir(host) and not os.path.islink(host) else "FILE_TYPE_FILE"
    e = {"name": os.path.basename(path), "type": kind, "path": path, "size": str(st.st_size),
         "mode": st.st_mode & 0o7777}
    if os.path.islink(host):
        e["symlinkTarget"] = os.readlink(host)
    return e


class Double:
    def __init__(self, tmp_path, key=None):
        self.key = key or "e2b_" + secrets.token_hex(16)
        self.base = Path(tmp_path) / "e2b"
        self.base.mkdir(parents=True, exist_ok=True)
        self.requests, self.sandboxes, self.procs = [], {}, {}
        self.lock = threading.Lock()

        class Handler(_Handler):
            pass
        Handler.double = self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="e2b-double", daemon=True).start()

    def calls(self):
        return [f"{r['method']} {r['path']}" for r in list(self.requests)]

    def live(self):
        return [s for s in self.sandboxes.values() if s.state != "destroyed"]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        for sb in list(self.sandboxes.values()):
            sb.destroy()


def start_e2b_double(tmp_path, key=None):
    return Double(tmp_path, key)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double = None

    def log_message(self, fmt, *args):
        pass

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(10)
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(10)
        if n > MAX_BODY:
            raise Fail(413, "too large")
        return self.rfile.read(n) if n else b""

    def send(self, status, data, ctype="application/json"):
        if not isinstance(data, (bytes, bytearray)):
            data = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        d = self.double
        u = urlsplit(self.path)
        path = unquote(u.path)
        query = {k: v[-1] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        sid = self.headers.get("E2b-Sandbox-Id")
        entry = {"method": self.command, "path": path, "query": query, "json": None, "sandbox": sid,
                 "user": self.headers.get("Authorization")}
        d.requests.append(entry)
        try:
            raw = self.body()
            if raw and self.headers.get("Content-Type", "").startswith("application/json"):
                entry["json"] = json.loads(raw)
            if sid is None:
                if self.headers.get("X-API-KEY") != d.key:
                    raise Fail(401, "Invalid API key")
                return self.control(path, entry["json"])
            sb = d.sandboxes.get(sid)
            if sb is None or sb.state == "destroyed":
                raise Fail(404, "sandbox not found", "not_found")
            if self.headers.get("X-Access-Token") != sb.token:
                raise Fail(401, "bad access token", "unauthenticated")
            return self.envd(sb, path, query, raw, entry)
        except Fail as e:
            if sid is None:
                self.send(e.status, {"code": e.status, "message": e.message})
            else:
                self.send(e.status, {"code": e.code or "unknown", "message": e.message})

    do_GET = do_POST = do_DELETE = handle_any

    def control(self, path, body):
        d = self.double
        if self.command == "POST" and path == "/v2/sandboxes":
            sb = Sandbox(d.base, {"labels": (body or {}).get("metadata") or {}}, "e2b", d.url)
            sb.token = secrets.token_hex(16)
            sb.create = body
            with d.lock:
                d.sandboxes[sb.id] = sb
            return self.send(201, {"sandboxID": sb.id, "templateID": body.get("templateID"), "clientID": "x",
                                   "envdVersion": "0.4.0", "envdAccessToken": sb.token, "domain": None})
        if self.command == "GET" and path == "/v2/sandboxes":
            return self.send(200, [{"sandboxID": s.id, "metadata": s.labels, "state": "running"}
                                   for s in d.live()])
        if self.command == "DELETE" and path.startswith("/sandboxes/"):
            sb = d.sandboxes.get(path.split("/")[2])
            if sb is None or sb.state == "destroyed":
                raise Fail(404, "sandbox not found")
            sb.destroy()
            return self.send(204, b"")
        raise Fail(404, f"no route {self.command} {path}")

    def envd(self, sb, path, query, raw, entry):
        if path == "/files" and self.command == "POST":
            parts = parse_multipart(self.headers.get("Content-Type", ""), raw)
            entry["json"] = [n for n, _, _ in parts]
            data = next((b for n, _, b in parts if n == "file"), None)
            host = sb.host_path(query["path"])
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_bytes(data)
            return self.send(200, [{"name": host.name, "type": "file", "path": query["path"]}])
        if path == "/files" and self.command == "GET":
            host = sb.host_path(query.get("path", ""))
            if not host.is_file():
                raise Fail(404, "file not found", "not_found")
            return self.send(200, host.read_bytes(), "application/octet-stream")
        if path == "/filesystem.Filesystem/MakeDir":
            host = sb.host_path(entry["json"]["path"])
            if host.exists():
                raise Fail(409, "already exists", "already_exists")
            host.mkdir(parents=True)
            return self.send(200, {"entry": entry_of(host, entry["json"]["path"])})
        if path == "/filesystem.Filesystem/ListDir":
            return self.list(sb, entry["json"])
        if path == "/process.Process/SendSignal":
            proc = self.double.procs.get(int(entry["json"]["process"]["pid"]))
            if proc is None:
                raise Fail(404, "process not found", "not_found")
            os.killpg(proc.pid, signal.SIGKILL)
            return self.send(200, {})
        if path == "/process.Process/Start":
            n = struct.unpack(">I", raw[1:5])[0]
            entry["json"] = json.loads(raw[5:5 + n])
            return self.start(sb, entry["json"])
        raise Fail(404, f"no route {path}", "not_found")

    def list(self, sb, body):
        root = body["path"]
        host = sb.host_path(root)
        if not host.is_dir():
            raise Fail(404, "not a directory", "not_found")
        out = []

        def walk(h, p, left):
            for name in sorted(os.listdir(h)):
                e = entry_of(os.path.join(h, name), posixpath.join(p, name))
                out.append(e)
                if left > 1 and e["type"] == "FILE_TYPE_DIRECTORY":
                    walk(os.path.join(h, name), e["path"], left - 1)
        walk(host, root, max(1, int(body.get("depth") or 1)))
        return self.send(200, {"entries": out})

    def start(self, sb, msg):
        p = msg["process"]
        cwd = p.get("cwd") or "/home/user"
        env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **(p.get("envs") or {})}
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", _ENTER, "enter",
                                 str(sb.root), cwd, p["cmd"], *p.get("args", [])],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True)
        self.double.procs[proc.pid] = proc
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        lock = threading.Lock()

        def frame(flags, doc):
            data = envelope(flags, doc)
            with lock:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        frame(0, {"event": {"start": {"pid": proc.pid}}})

        def pump(stream, name):
            for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
                try:
                    frame(0, {"event": {"data": {name: base64.b64encode(chunk).decode()}}})
                except OSError:
                    return
        pumps = [threading.Thread(target=pump, args=(proc.stdout, "stdout")),
                 threading.Thread(target=pump, args=(proc.stderr, "stderr"))]
        for t in pumps:
            t.start()
        ms = int(self.headers.get("Connect-Timeout-Ms") or 0)
        try:
            proc.wait(ms / 1000 if ms else None)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
        for t in pumps:
            t.join()
        try:
            if timed_out:
                frame(2, {"error": {"code": "deadline_exceeded", "message": "the command's deadline"}})
            else:
                rc = proc.returncode
                status = f"signal: {'killed' if rc == -9 else signal.Signals(-rc).name}" if rc < 0 \
                    else f"exit status {rc}"
                frame(0, {"event": {"end": {"exitCode": rc if rc >= 0 else -1, "exited": rc >= 0,
                                            "status": status}}})
                frame(2, {})
            with lock:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
