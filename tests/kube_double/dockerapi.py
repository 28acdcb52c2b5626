"""A minimal client of dockerd's Engine API over its unix socket (http.client:
no docker CLI, one process less per call)."""
import http.client
import json
import socket
import urllib.parse


class DockerError(Exception):
    def __init__(self, status, message):
        super().__init__(f"docker {status}: {message}")
        self.status = status
        self.message = message


class _Conn(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("docker", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Docker:
    def __init__(self, sock):
        self.sock = str(sock)

    def _open(self, method, path, body=None, query=None, timeout=60):
        if query:
            path += "?" + urllib.parse.urlencode(query)
        c = _Conn(self.sock, timeout)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, "/v1.41" + path, body=data,
                  headers={"Content-Type": "application/json"} if data is not None else {})
        return c, c.getresponse()

    def call(self, method, path, body=None, query=None, timeout=60, ok=(200, 201, 204, 304)):
        c, r = self._open(method, path, body, query, timeout)
        try:
            raw = r.read()
        finally:
            c.close()
        if r.status not in ok:
            try:
                msg = json.loads(raw).get("message", raw.decode(errors="replace"))
            except ValueError:
                msg = raw.decode(errors="replace")
            raise DockerError(r.status, msg)
        return json.loads(raw) if raw.strip() and r.getheader("Content-Type", "").startswith("application/json") else raw

    def pull(self, ref, timeout=600):
        """Pull REF (REPO@sha256:...); raises DockerError with the registry's
        answer (the progress stream carries errors as {"error": ...})."""
        repo, _, digest = ref.partition("@")
        c, r = self._open("POST", "/images/create", query={"fromImage": repo + "@" + digest} if digest
                          else {"fromImage": ref}, timeout=timeout)
        try:
            raw = r.read()
        finally:
            c.close()
        if r.status != 200:
            raise DockerError(r.status, raw.decode(errors="replace").strip())
        for line in raw.splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if "error" in ev:
                raise DockerError(500, ev["error"])

    def image_present(self, ref):
        try:
            self.call("GET", f"/images/{urllib.parse.quote(ref, safe='')}/json")
            return True
        except DockerError as e:
            if e.status == 404:
                return False
            raise

    def logs(self, cid):
        """A file-like reader of the container's multiplexed log stream
        (follow) and its connection, to be closed by the caller."""
        c, r = self._open("GET", f"/containers/{cid}/logs",
                          query={"stdout": 1, "stderr": 1, "follow": 1}, timeout=None)
        if r.status != 200:
            raw = r.read()
            c.close()
            raise DockerError(r.status, raw.decode(errors="replace"))
        return c, r


def demux(r):
    """Yield the payloads of a multiplexed (non-TTY) stream in arrival order:
    stdout and stderr merged, as the kubelet's log file has them."""
    while True:
        head = r.read(8)
        if len(head) < 8:
            return
        n = int.from_bytes(head[4:8], "big")
        data = r.read(n)
        if data:
            yield data
        if len(data) < n:
            return
