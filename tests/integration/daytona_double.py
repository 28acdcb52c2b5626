"""A Daytona-compatible HTTP endpoint for the test suite: a TEST DOUBLE of the
remote Daytona service, never a service to expose. It serves what
`@daytonaio/sdk` 0.218.0 calls (read from its dist and that of
@daytona/api-client and @daytona/toolbox-api-client), so that airlock's
daytona driver and the SDK itself can be tested without the real service:

  control plane, {url} = http://127.0.0.1:PORT/api, `Authorization: Bearer KEY`
    POST   /sandbox                       create: {env, labels, target, name?} -> Sandbox DTO, state "started"
    GET    /sandbox                       list: {items, total, page, totalPages, nextCursor}
    GET    /sandbox/{idOrName}            the DTO, 404 once deleted
    DELETE /sandbox/{idOrName}            the DTO in state "destroyed"; its tree is removed
    GET    /sandbox/{id}/toolbox-proxy-url  {url}
    GET    /config                        a few fields; /socket.io/ is 404 (the SDK shrugs it off)
  toolbox, {toolboxProxyUrl}/{id}/..., same Bearer key
    POST /process/execute    {command, cwd?, envs?, timeout?} -> {exitCode, result}: the command
                             is split on spaces honouring '...' and "..." and run WITHOUT a shell,
                             as Daytona's daemon does (so a driver must send `sh -c '...'` itself);
                             stdout and stderr merged; over its timeout (seconds): 408
    POST /process/code-run   {code, language, argv?, envs?, timeout?} -> {exitCode, result}
                             (python: python3 -c; javascript: node -e)
    POST /files/bulk-upload  multipart: files[i].path + files[i].file
    POST /files/upload-v2?path=P  multipart (field file) or the raw body; /files/upload the same (legacy)
    POST /files/bulk-download {paths} -> multipart/form-data, one part per path: name="file"
                             filename=<the path as asked>, or name="error" with a JSON error
    GET  /files/download?path=P, GET /files?path=P (FileInfo[]), GET /files/info?path=P,
    POST /files/folder?path=P&mode=M, DELETE /files?path=P&recursive=true

A sandbox is a directory TMP/daytona/<id>/root: the remote filesystem. Its
/home/daytona (the working directory of relative paths and commands), /work,
/out and /tmp are plain directories of that tree; /usr, /etc, /dev and /proc
are the host's, bind-mounted (usr and etc read-only) in a private mount
namespace (`unshare -m`, which needs root: the suite runs as root) in which
the command is chroot'ed to the tree. So a script that writes /out/x writes
TMP/daytona/<id>/root/out/x, and the host sees none of the mounts.

It runs only the suite's own test commands, as root inside that chroot: it
is not a sandbox. Every request is logged in `.requests` (method, path,
query, JSON body or multipart field names, whether the key was right), so a
driver test can assert on the calls it made.

Use: `d = start_daytona_double(tmp_path)`; `d.url`, `d.key`, `d.requests`,
`d.stop()`; or the `daytona_double` fixture.
"""
import email.parser
import email.policy
import json
import os
import posixpath
import secrets
import shutil
import signal
import stat
import subprocess
import threading
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

MAX_BODY = 64 << 20            # a request body (uploads included)
MAX_OUTPUT = 16 << 20          # what a command's merged output keeps
MAX_TIMEOUT = 360              # seconds: the daemon's old default, and this double's cap
HOME = "/home/daytona"
SYSTEM = ("usr", "etc", "dev", "proc")          # the host's, bind-mounted per command
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Run in the private mount namespace: bind the host's system directories into
# the tree, make /usr and /etc read-only there (the command runs as root), and
# chroot. $1 the tree, $2 the working directory, the rest the command.
_ENTER = r'''
set -e
r=$1; cwd=$2; shift 2
for d in usr etc dev proc; do mount --rbind "/$d" "$r/$d"; done
mount -o remount,bind,ro "$r/usr"
mount -o remount,bind,ro "$r/etc"
exec chroot "$r" /bin/sh -c 'cd "$0" || exit 126; exec "$@"' "$cwd" "$@"
'''


def now():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def split_command(command):
    """The daemon's split: on spaces outside quotes; a quote of either kind
    opens until the same kind closes and is dropped; no escapes, no shell."""
    args, cur, quote, have = [], [], None, False
    for ch in command:
        if ch in "'\"" and quote is None:
            quote, have = ch, True
        elif ch == quote:
            quote = None
        elif ch == " " and quote is None:
            if cur or have:
                args.append("".join(cur))
            cur, have = [], False
        else:
            cur.append(ch)
    if cur or have:
        args.append("".join(cur))
    return args


class Fail(Exception):
    def __init__(self, status, message, code=None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class Sandbox:
    def __init__(self, base, body, target, proxy):
        self.id = str(uuid.uuid4())
        self.name = body.get("name") or self.id
        self.env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
        self.labels = {str(k): str(v) for k, v in (body.get("labels") or {}).items()}
        self.target = body.get("target") or target
        self.proxy = proxy
        self.created = now()
        self.state = "started"
        self.dir = Path(base) / self.id
        self.root = self.dir / "root"
        for d in ("home/daytona", "work", "out", "tmp", *SYSTEM):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "tmp", 0o1777)
        for link in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
            host = Path("/") / link
            if host.is_symlink():               # Debian 12: merged /usr
                os.symlink(os.readlink(host), self.root / link)

    def dto(self):
        return {
            "id": self.id, "organizationId": "org-airlock-test", "name": self.name,
            "snapshot": "daytona-double", "user": "daytona", "env": self.env, "labels": self.labels,
            "public": False, "networkBlockAll": False, "target": self.target,
            "cpu": 1, "gpu": 0, "memory": 1, "disk": 3, "state": self.state, "desiredState": self.state,
            "autoStopInterval": 15, "autoArchiveInterval": 10080, "autoDeleteInterval": -1,
            "createdAt": self.created, "updatedAt": now(), "daemonVersion": "double",
            "sandboxClass": "container", "toolboxProxyUrl": self.proxy,
        }

    def host_path(self, path):
        """The host path of remote PATH (relative: against /home/daytona),
        never outside the tree (a symlink pointing out is refused)."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise Fail(400, "path is required", "BAD_REQUEST")
        full = posixpath.normpath(posixpath.join(HOME, path))
        host = self.root / full.lstrip("/")
        real = os.path.realpath(host)
        if real != str(self.root) and not real.startswith(str(self.root) + "/"):
            raise Fail(403, f"{path}: outside the sandbox", "FILE_ACCESS_DENIED")
        return Path(real)

    def destroy(self):
        self.state = "destroyed"
        # the binds live only in each command's namespace; never walk into one
        if not any(os.path.ismount(self.root / d) for d in SYSTEM):
            shutil.rmtree(self.dir, ignore_errors=True)


def file_info(p, name=None):
    st = os.lstat(p)
    mtime = datetime.fromtimestamp(st.st_mtime, timezone.utc).isoformat()
    return {
        "name": name or os.path.basename(p), "isDir": stat.S_ISDIR(st.st_mode), "size": st.st_size,
        "mode": stat.filemode(st.st_mode), "permissions": oct(stat.S_IMODE(st.st_mode))[2:].zfill(4),
        "modTime": mtime, "modifiedAt": mtime, "owner": str(st.st_uid), "group": str(st.st_gid),
    }


def parse_multipart(content_type, body):
    """[(field name, filename or None, bytes)] of a multipart/form-data body."""
    if not content_type or not content_type.startswith("multipart/form-data"):
        raise Fail(400, "expected multipart/form-data", "BAD_REQUEST")
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    if not msg.is_multipart():
        raise Fail(400, "malformed multipart body", "BAD_REQUEST")
    return [(p.get_param("name", header="content-disposition"), p.get_filename(),
             p.get_payload(decode=True) or b"") for p in msg.iter_parts()]


class Double:
    def __init__(self, tmp_path, key=None, target="us"):
        self.key = key or "dtn_" + secrets.token_hex(16)
        self.target = target
        self.base = Path(tmp_path) / "daytona"
        self.base.mkdir(parents=True, exist_ok=True)
        self.requests = []
        self.sandboxes = {}
        self.lock = threading.Lock()
        double = self

        class Handler(_Handler):
            pass
        Handler.double = double
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self.url = self.origin + "/api"
        self.toolbox_url = self.origin + "/toolbox"
        self.thread = threading.Thread(target=self.server.serve_forever, name="daytona-double", daemon=True)
        self.thread.start()

    def calls(self):
        """'METHOD /path' of each request seen, in order."""
        return [f"{r['method']} {r['path']}" for r in list(self.requests)]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        for sb in list(self.sandboxes.values()):
            sb.destroy()

    def find(self, id_or_name):
        with self.lock:
            for sb in self.sandboxes.values():
                if sb.state != "destroyed" and id_or_name in (sb.id, sb.name):
                    return sb
        raise Fail(404, f"Sandbox with ID or name {id_or_name} not found", "NOT_FOUND")


def start_daytona_double(tmp_path, key=None):
    """A running double with its sandboxes under TMP_PATH: .url (the apiUrl),
    .key (its one valid API key), .requests, .stop()."""
    return Double(tmp_path, key)


@pytest.fixture
def daytona_double(tmp_path):
    d = start_daytona_double(tmp_path)
    yield d
    d.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double = None

    def log_message(self, fmt, *args):          # the request log is .requests
        pass

    def handle(self):
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):    # a client that went away
            pass

    # ---------------------------------------------------------------- plumbing
    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                try:
                    size = int(self.rfile.readline(100).split(b";")[0].strip() or b"0", 16)
                except ValueError:
                    raise Fail(400, "malformed chunked body", "BAD_REQUEST")
                if size < 0:
                    raise Fail(400, "malformed chunked body", "BAD_REQUEST")
                if size == 0:
                    while self.rfile.readline(1000) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    raise Fail(413, "request body too large", "BAD_REQUEST")
                out += self.rfile.read(size)
                self.rfile.readline(10)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise Fail(413, "request body too large", "BAD_REQUEST")
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
        entry = {"method": self.command, "path": path, "query": query, "json": None,
                 "auth": self.headers.get("Authorization") == f"Bearer {d.key}"}
        d.requests.append(entry)
        raw = None
        try:
            raw = self.body()
            ctype = self.headers.get("Content-Type", "")
            if raw and ctype.startswith("application/json"):
                try:
                    entry["json"] = json.loads(raw)
                except ValueError:
                    raise Fail(400, "invalid JSON body", "INVALID_REQUEST_BODY")
            if path.startswith("/api/socket.io/"):
                raise Fail(404, "no events in the double", "NOT_FOUND")
            if not entry["auth"]:
                raise Fail(401, "Invalid credentials", "UNAUTHORIZED")
            parts = [p for p in path.split("/") if p]
            if parts[:1] == ["api"]:
                status, data = self.control(parts[1:], query, entry["json"])
            elif parts[:1] == ["toolbox"] and len(parts) >= 3:
                sb = d.find(parts[1])
                status, data = Toolbox(sb).route(self.command, "/" + "/".join(parts[2:]), query,
                                                 entry, raw, ctype)
            else:
                raise Fail(404, f"Cannot {self.command} {path}", "NOT_FOUND")
            if isinstance(data, tuple):        # (bytes, content type)
                self.send(status, data[0], data[1])
            else:
                self.send(status, data)
        except Fail as e:
            if raw is None:         # the body was not read to its end: the connection cannot go on
                self.close_connection = True
            self.send(e.status, {"statusCode": e.status, "message": e.message, "code": e.code,
                                 "error": e.message, "path": path, "method": self.command,
                                 "timestamp": now()})

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any

    # ----------------------------------------------------------- control plane
    def control(self, parts, query, body):
        d = self.double
        m = self.command
        if parts == ["config"] and m == "GET":
            return 200, {"version": "double", "defaultSnapshot": "daytona-double",
                         "analyticsApiUrl": None, "proxyToolboxUrl": d.toolbox_url}
        if parts == ["sandbox"] and m == "POST":
            if not isinstance(body, dict):
                raise Fail(400, "a JSON object is required", "BAD_REQUEST")
            if body.get("name") and any(s.name == body["name"] and s.state != "destroyed"
                                        for s in d.sandboxes.values()):
                raise Fail(409, f"Sandbox with name {body['name']} already exists", "CONFLICT")
            sb = Sandbox(d.base, body, d.target, d.toolbox_url)
            with d.lock:
                d.sandboxes[sb.id] = sb
            return 200, sb.dto()
        if parts == ["sandbox"] and m == "GET":
            items = [s.dto() for s in d.sandboxes.values() if s.state != "destroyed"]
            return 200, {"items": items, "total": len(items), "page": 1, "totalPages": 1, "nextCursor": None}
        if len(parts) == 2 and parts[0] == "sandbox":
            sb = d.find(parts[1])
            if m == "GET":
                return 200, sb.dto()
            if m == "DELETE":
                sb.destroy()
                return 200, sb.dto()
        if len(parts) == 3 and parts[0] == "sandbox" and parts[2] == "toolbox-proxy-url" and m == "GET":
            return 200, {"url": d.find(parts[1]).proxy}
        raise Fail(404, f"Cannot {m} /api/{'/'.join(parts)}", "NOT_FOUND")


class Toolbox:
    """The daemon's endpoints of one sandbox."""

    def __init__(self, sb):
        self.sb = sb

    def route(self, method, path, query, entry, raw, ctype):
        body = entry["json"]
        if (method, path) == ("POST", "/process/execute"):
            return self.execute(body)
        if (method, path) == ("POST", "/process/code-run"):
            return self.code_run(body)
        if (method, path) == ("POST", "/files/bulk-upload"):
            parts = parse_multipart(ctype, raw)
            entry["json"] = [n for n, _, _ in parts]
            return self.bulk_upload(parts)
        if method == "POST" and path in ("/files/upload-v2", "/files/upload"):
            # multipart (field "file") or the raw body, as the daemon takes both;
            # /files/upload is its legacy name, answered with no body
            data = raw
            if ctype.startswith("multipart/form-data"):
                parts = parse_multipart(ctype, raw)
                entry["json"] = [n for n, _, _ in parts]
                data = next((b for n, _, b in parts if n == "file"), None)
                if data is None:
                    raise Fail(400, "no file part", "BAD_REQUEST")
            self.write(query.get("path"), data)
            if path == "/files/upload":
                return 200, b""
            return 200, {"name": posixpath.basename(query["path"]), "path": query["path"], "type": "file"}
        if (method, path) == ("POST", "/files/bulk-download"):
            return self.bulk_download(body)
        if (method, path) == ("GET", "/files/download"):
            p = self.sb.host_path(query.get("path"))
            if not p.is_file():
                raise Fail(404, f"file not found: {query.get('path')}", "FILE_NOT_FOUND")
            return 200, (p.read_bytes(), "application/octet-stream")
        if (method, path) == ("GET", "/files"):
            return self.list(query.get("path") or ".", int(query.get("depth") or 1))
        if (method, path) == ("GET", "/files/info"):
            p = self.sb.host_path(query.get("path"))
            if not os.path.lexists(p):
                raise Fail(404, f"not found: {query.get('path')}", "FILE_NOT_FOUND")
            return 200, file_info(p)
        if (method, path) == ("POST", "/files/folder"):
            p = self.sb.host_path(query.get("path"))
            p.mkdir(parents=True, exist_ok=True)
            os.chmod(p, int(query.get("mode") or "755", 8))
            return 201, {}
        if (method, path) == ("DELETE", "/files"):
            p = self.sb.host_path(query.get("path"))
            if p.is_dir() and not p.is_symlink():
                if query.get("recursive") != "true":
                    raise Fail(400, "a directory: recursive=true needed", "BAD_REQUEST")
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)
            else:
                raise Fail(404, f"not found: {query.get('path')}", "FILE_NOT_FOUND")
            return 204, b""
        raise Fail(404, f"Cannot {method} {path}", "NOT_FOUND")

    # ------------------------------------------------------------------ files
    def write(self, path, data):
        p = self.sb.host_path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_dir():
            raise Fail(400, f"{path}: is a directory", "BAD_REQUEST")
        p.write_bytes(data)

    def bulk_upload(self, parts):
        paths, files = {}, {}
        for name, _, data in parts:
            if name and name.startswith("files[") and name.endswith("].path"):
                paths[name[:-len(".path")]] = data.decode()
            elif name and name.startswith("files[") and name.endswith("].file"):
                files[name[:-len(".file")]] = data
        if not files or set(paths) != set(files):
            raise Fail(400, "each files[i].file needs its files[i].path", "BAD_REQUEST")
        for k, data in files.items():
            self.write(paths[k], data)
        return 200, {}

    def bulk_download(self, body):
        if not isinstance(body, dict) or not isinstance(body.get("paths"), list) or not body["paths"]:
            raise Fail(400, 'request body must be {"paths": [ ... ]} and non-empty', "BAD_REQUEST")
        boundary = "DAYTONA-FILE-BOUNDARY-" + secrets.token_hex(8)
        out = bytearray()
        for raw in body["paths"]:
            # quoted as Go's multipart writer quotes; CR and LF would end the header
            name = (str(raw).replace("\\", "\\\\").replace('"', '\\"')
                    .replace("\r", "%0D").replace("\n", "%0A"))
            try:
                p = self.sb.host_path(raw)
                data = p.read_bytes() if p.is_file() else None
            except Fail:
                data = None
            if data is None:
                err = json.dumps({"message": f"file not found: {raw}", "statusCode": 404,
                                  "code": "FILE_NOT_FOUND"}).encode()
                head = (f'Content-Disposition: form-data; name="error"; filename="{name}"\r\n'
                        "Content-Type: application/json\r\n")
                data = err
            else:
                head = (f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'
                        "Content-Type: application/octet-stream\r\n"
                        f"Content-Length: {len(data)}\r\n")
            out += f"--{boundary}\r\n{head}\r\n".encode() + data + b"\r\n"
        out += f"--{boundary}--\r\n".encode()
        return 200, (bytes(out), f"multipart/form-data; boundary={boundary}")

    def list(self, path, depth):
        p = self.sb.host_path(path)
        if not p.is_dir():
            raise Fail(404, f"not a directory: {path}", "FILE_NOT_FOUND")
        out = []

        def walk(d, rel, left):
            for name in sorted(os.listdir(d)):
                full = os.path.join(d, name)
                info = file_info(full)
                info["path"] = posixpath.join(rel, name)
                out.append(info)
                if left > 1 and info["isDir"] and not os.path.islink(full):
                    walk(full, info["path"], left - 1)
        walk(p, posixpath.normpath(posixpath.join(HOME, path)), max(1, min(depth, 16)))
        return 200, out

    # -------------------------------------------------------------- processes
    def run(self, argv, cwd, envs, timeout):
        env = {"PATH": PATH, "HOME": HOME, "LANG": "C.UTF-8", **self.sb.env}
        for k, v in (envs or {}).items():
            if not isinstance(k, str) or not k or "=" in k or "\0" in k:
                raise Fail(400, f"invalid environment variable name {k!r}", "BAD_REQUEST")
            env[k] = str(v)
        where = posixpath.normpath(posixpath.join(HOME, cwd or HOME))
        if not self.sb.host_path(where).is_dir():
            return 200, {"exitCode": -1, "result": f"chdir {where}: no such file or directory"}
        limit = MAX_TIMEOUT if not timeout or timeout <= 0 else min(int(timeout), MAX_TIMEOUT)
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", _ENTER,
                                 "enter", str(self.sb.root), where, *argv],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise Fail(408, f"Command execution timed out after {limit} seconds. The timeout can be "
                       "increased by adjusting the timeout parameter in the request.", "REQUEST_TIMEOUT")
        return 200, {"exitCode": proc.returncode, "result": out[:MAX_OUTPUT].decode(errors="replace")}

    def execute(self, body):
        if not isinstance(body, dict) or not isinstance(body.get("command"), str):
            raise Fail(400, "command is required", "BAD_REQUEST")
        argv = split_command(body["command"])
        if not argv:
            raise Fail(400, "empty command", "BAD_REQUEST")
        return self.run(argv, body.get("cwd"), body.get("envs"), body.get("timeout"))

    def code_run(self, body):
        if not isinstance(body, dict) or not isinstance(body.get("code"), str):
            raise Fail(400, "code is required", "INVALID_REQUEST_BODY")
        runner = {"python": ["python3", "-c"], "javascript": ["node", "-e"]}.get(body.get("language"))
        if runner is None:
            raise Fail(400, f"unsupported language in the double: {body.get('language')!r}", "BAD_REQUEST")
        argv = [str(a) for a in (body.get("argv") or [])]
        if runner[0] == "node":
            argv = ["--", *argv]
        return self.run([*runner, body["code"], *argv], None, body.get("envs"), body.get("timeout"))
