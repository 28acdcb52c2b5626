"""The double's HTTP handler: the Kubernetes API calls airlock's driver makes
(kube_contract.md), what kubectl needs to read the objects, and the
/_double control endpoints (faults, what it holds, the requests it saw),
which are no part of any Kubernetes API."""
import json
import re
import ssl
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

import podsecurity
import schema

RESOURCES = {  # path segment -> (kind, api group version, list kind)
    "pods": ("Pod", "v1", "PodList"),
    "secrets": ("Secret", "v1", "SecretList"),
    "networkpolicies": ("NetworkPolicy", "networking.k8s.io/v1", "NetworkPolicyList"),
}
BOOKMARK_S = 2.0
BODY_MAX = 3 << 20     # the API server's request limit is about 3 MiB


def status(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
         "reason": reason, "code": code}
    if details:
        s["details"] = details
    return s


def parse_selector(sel):
    """A label selector's requirements: (key, op, values). ValueError when malformed."""
    reqs = []
    for part in re.findall(r"(?:[^,(]|\([^)]*\))+", sel or ""):
        part = part.strip()
        m = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", part)
        if m:
            reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", [m.group(3)]))
            continue
        m = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            reqs.append((m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]))
            continue
        m = re.fullmatch(r"(!?)([\w./-]+)", part)
        if m:
            reqs.append((m.group(2), "!" if m.group(1) else "exists", []))
            continue
        raise ValueError(f"unable to parse requirement: {part}")
    return reqs


def selected(obj, labels, fields):
    have = obj["metadata"].get("labels") or {}
    for k, op, vals in labels:
        v = have.get(k)
        if (op == "=" and v != vals[0]) or (op == "!=" and v == vals[0]) or (op == "in" and v not in vals) or \
           (op == "notin" and v in vals) or (op == "exists" and v is None) or (op == "!" and v is not None):
            return False
    for k, op, vals in fields:
        v = {"metadata.name": obj["metadata"]["name"], "metadata.namespace": obj["metadata"].get("namespace"),
             "status.phase": (obj.get("status") or {}).get("phase")}.get(k)
        if (op == "=" and v != vals[0]) or (op == "!=" and v == vals[0]):
            return False
    return True


def qos(spec):
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    guaranteed, any_set = True, False
    for c in cs:
        r = c.get("resources") or {}
        lim, req = r.get("limits") or {}, r.get("requests") or {}
        any_set = any_set or bool(lim or req)
        for k in ("cpu", "memory"):
            if k not in lim or schema.parse_quantity(req.get(k, lim[k])) != schema.parse_quantity(lim[k]):
                guaranteed = False
    return "Guaranteed" if guaranteed else "Burstable" if any_set else "BestEffort"


def default_pod(pod, namespace):
    meta, spec = pod["metadata"], pod["spec"]
    meta["namespace"] = namespace
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        digest = "@" in c["image"] or not (c["image"].endswith(":latest") or ":" not in c["image"].split("/")[-1])
        c.setdefault("imagePullPolicy", "IfNotPresent" if digest else "Always")
        lim = (c.get("resources") or {}).get("limits")
        if lim:
            c["resources"].setdefault("requests", dict(lim))
    for v in spec.get("volumes") or []:
        if isinstance(v.get("secret"), dict):
            v["secret"].setdefault("defaultMode", 0o644)
    pod["status"] = {"phase": "Pending", "qosClass": qos(spec)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-double"
    d = None   # the Double, set by __main__

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        self.request.settimeout(30)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()
        self.request.settimeout(None)

    # ------------------------------------------------------------ replies
    def _send(self, code, doc, headers=()):
        body = json.dumps(doc).encode() if not isinstance(doc, bytes) else doc
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Audit-Id", f"{time.monotonic_ns():x}")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self._code = code

    def _fail(self, code, reason, message, details=None):
        self._send(code, status(code, reason, message, details))

    def _chunk(self, b):
        if b:
            self.wfile.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            self.wfile.flush()

    def _start_stream(self, ctype):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._code = 200

    def _end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > BODY_MAX:
            raise ValueError("the request is too large")
        return self.rfile.read(n) if n else b""

    # ------------------------------------------------------------ dispatch
    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def _auth(self):
        h = self.headers.get("Authorization", "")
        if h.startswith("Bearer ") and h[7:].strip() == self.d.token:
            return "token"
        if isinstance(self.request, ssl.SSLSocket) and self.request.getpeercert():
            return "cert"
        return None

    def _dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        self.q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        self._code = None
        path = url.path.rstrip("/") or "/"
        auth = None
        try:
            if path.startswith("/_double/"):
                return self._control(method, path)
            auth = self._auth()
            if auth is None:
                return self._fail(401, "Unauthorized", "Unauthorized")
            if self.d.take_500():
                return self._fail(500, "InternalError", "Internal error occurred: kube_double fault status_500")
            self._api(method, path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if not path.startswith("/_double/"):
                self.d.record({"method": method, "path": path, "query": self.q, "auth": auth, "code": self._code,
                               "time": time.time()})

    def _api(self, method, path):
        d = self.d
        if method == "GET" and path in d.discovery:
            return self._send(200, d.discovery[path])
        if method == "GET" and path in ("/healthz", "/livez", "/readyz"):
            return self._send(200, b"ok")
        if method == "GET" and re.fullmatch(r"/api/v1/namespaces/[^/]+/events|/apis/events\.k8s\.io/v1/namespaces/[^/]+/events",
                                            path):
            # no events are recorded (kubectl describe asks for them)
            return self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": str(d.store.rv)},
                                    "items": []})
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
        if m and method == "GET":
            if m.group(1) != d.namespace:
                return self._fail(404, "NotFound", f'namespaces "{m.group(1)}" not found',
                                  {"name": m.group(1), "kind": "namespaces"})
            return self._send(200, d.namespace_object())
        m = re.fullmatch(r"/(?:api/v1|apis/networking\.k8s\.io/v1)/namespaces/([^/]+)/(pods|secrets|networkpolicies)"
                         r"(?:/([^/]+))?(?:/(log))?", path)
        if not m or (m.group(2) == "networkpolicies") != path.startswith("/apis/"):
            return self._fail(404, "NotFound", "the server could not find the requested resource")
        ns, res, name, sub = m.groups()
        if sub and res != "pods":
            return self._fail(404, "NotFound", "the server could not find the requested resource")
        if ns != d.namespace:
            if method == "POST":
                return self._fail(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
            if name:
                return self._fail(404, "NotFound", f'{res} "{name}" not found', {"name": name, "kind": res})
        if sub == "log" and method == "GET":
            return self._log(name)
        if name is None and method == "GET":
            return self._watch(res) if self.q.get("watch") in ("1", "true") else self._list(res, ns)
        if name is None and method == "POST":
            return self._create(res)
        if name and method == "GET":
            o = d.store.get(res, name)
            if o is None:
                return self._fail(404, "NotFound", f'{res} "{name}" not found', {"name": name, "kind": res})
            return self._send(200, d.with_kind(res, o))
        if name and method == "DELETE":
            return self._delete(res, name)
        return self._fail(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    # ------------------------------------------------------------ verbs
    def _create(self, res):
        d = self.d
        kind = RESOURCES[res][0]
        fv = self.q.get("fieldValidation", "Warn")
        if fv not in ("Ignore", "Warn", "Strict"):
            return self._fail(400, "BadRequest", f'fieldValidation must be one of "Ignore", "Warn", or "Strict", got "{fv}"')
        try:
            body = self._body()
            obj, warnings = schema.decode(body, kind, fv)
        except schema.DecodeError as e:
            return self._fail(400, "BadRequest", str(e))
        except ValueError as e:
            return self._fail(413, "RequestEntityTooLarge", str(e))
        if obj.get("kind") not in (None, kind) or obj.get("apiVersion") not in (None, RESOURCES[res][1]):
            return self._fail(400, "BadRequest", f'the API version in the data ({obj.get("apiVersion")}) does not match '
                              f'the expected API version ({RESOURCES[res][1]})' if obj.get("kind") == kind else
                              f'{kind} in version "v1" cannot be handled as a {kind}: no kind "{obj.get("kind")}" is '
                              f'registered for version "{obj.get("apiVersion")}" in scheme "pkg/api/legacyscheme/scheme.go:30"')
        obj.pop("status", None)
        obj.setdefault("metadata", {})
        meta = obj["metadata"]
        if meta.get("namespace") not in (None, "", d.namespace):
            return self._fail(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                              "sent on the request")
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "selfLink", "generation"):
            meta.pop(k, None)
        validate = {"pods": schema.validate_pod, "secrets": schema.validate_secret,
                    "networkpolicies": schema.validate_netpol}[res]
        causes = validate(obj, d.namespace)
        name = meta.get("name", "")
        if causes:
            msg = f'{kind} "{name}" is invalid: ' + (causes[0]["message"] if len(causes) == 1 else
                                                       "[" + ", ".join(c["message"] for c in causes) + "]")
            return self._fail(422, "Invalid", msg, {"name": name, "kind": kind, "causes": causes})
        if res == "pods":
            reasons = podsecurity.violations(obj)
            if reasons:
                return self._fail(403, "Forbidden", podsecurity.message(name, reasons), {"name": name, "kind": "pods"})
            default_pod(obj, d.namespace)
        else:
            meta["namespace"] = d.namespace
            if res == "secrets":
                obj.setdefault("type", "Opaque")
                for k, v in (obj.pop("stringData", None) or {}).items():
                    import base64
                    obj.setdefault("data", {})[k] = base64.b64encode(v.encode()).decode()
        hdrs = [("Warning", '299 - ' + json.dumps(w)) for w in warnings]
        if self.q.get("dryRun") == "All":
            return self._send(201, d.with_kind(res, obj), hdrs)
        stored = d.store.create(res, obj)
        if stored is None:
            return self._fail(409, "AlreadyExists", f'{res} "{name}" already exists', {"name": name, "kind": res})
        if res == "pods":
            d.kubelet.admit(stored)
        self._send(201, d.with_kind(res, stored), hdrs)

    def _delete(self, res, name):
        d = self.d
        try:
            body = self._body()
            opts, _ = schema.decode(body, "DeleteOptions", "Strict") if body.strip() else ({}, [])
        except schema.DecodeError as e:
            # DeleteOptions are always decoded strictly here: THE DOUBLE'S RULE (a real server ignores unknown fields)
            return self._fail(400, "BadRequest", str(e).replace('DeleteOptions in version "v1" cannot be handled as a '
                                                                 'DeleteOptions: ', ""))
        grace = opts.get("gracePeriodSeconds", self.q.get("gracePeriodSeconds"))
        pp = opts.get("propagationPolicy", self.q.get("propagationPolicy"))
        if pp not in (None, "Orphan", "Background", "Foreground"):
            return self._fail(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                              f'value: "{pp}": supported values: "Foreground", "Background", "Orphan"')
        o = d.store.get(res, name)
        if o is None:
            return self._fail(404, "NotFound", f'{res} "{name}" not found', {"name": name, "kind": res})
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != o["metadata"]["uid"]:
            return self._fail(409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": Precondition failed: '
                              f'UID in precondition: {pre["uid"]}, UID in object meta: {o["metadata"]["uid"]}')
        if res != "pods":
            gone = d.store.delete(res, name)
            return self._send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                    "details": {"name": name, "kind": res, "uid": gone["metadata"]["uid"]}})
        grace = int(grace) if grace is not None else o["spec"].get("terminationGracePeriodSeconds", 30)
        return self._send(200, d.with_kind("pods", d.delete_pod(name, grace)))

    def _list(self, res, ns):
        try:
            labels = parse_selector(self.q.get("labelSelector"))
            fields = parse_selector(self.q.get("fieldSelector"))
        except ValueError as e:
            return self._fail(400, "BadRequest", str(e))
        items, rv = self.d.store.list(res)
        if ns != self.d.namespace:
            items = []
        items = [i for i in items if selected(i, labels, fields)]
        self._send(200, {"kind": RESOURCES[res][2], "apiVersion": RESOURCES[res][1], "metadata": {"resourceVersion": rv},
                         "items": items})

    def _watch(self, res):
        d, store = self.d, self.d.store
        try:
            labels = parse_selector(self.q.get("labelSelector"))
            fields = parse_selector(self.q.get("fieldSelector"))
            rv = self.q.get("resourceVersion") or "0"
            rv_n = int(rv)
        except ValueError as e:
            return self._fail(400, "BadRequest", str(e))
        if d.take_watch_410():
            return self._fail(410, "Expired", f"too old resource version: {rv} ({store.rv})")
        timeout = min(int(self.q.get("timeoutSeconds") or 1800), 3600)
        bookmarks = self.q.get("allowWatchBookmarks") in ("true", "1")
        kind, gv = RESOURCES[res][0], RESOURCES[res][1]
        end = time.monotonic() + timeout
        with store.lock:
            gen = store.generation
            if rv_n == 0 or self.q.get("sendInitialEvents") == "true":
                pending = [("ADDED", o) for (r, _), o in store.objects.items() if r == res]
                cur = store.rv
            else:
                got = store.since(res, rv_n)
                if got is None:
                    pending, cur = None, store.rv
                else:
                    pending, cur = [(t, o) for _, _, t, o in got[0]], got[1]
        self._start_stream("application/json")
        if pending is None:
            self._event("ERROR", status(410, "Expired", f"too old resource version: {rv} ({store.oldest})"))
            return self._end_stream()
        if self.q.get("sendInitialEvents") == "true":
            # a streaming list (client-go's WatchListClient, kubectl wait and
            # delete): the current objects, then a bookmark marking their end
            for typ, o in pending:
                if selected(o, labels, fields):
                    self._event(typ, d.with_kind(res, o))
            pending = []
            self._event("BOOKMARK", {"kind": kind, "apiVersion": gv, "metadata": {
                "resourceVersion": str(cur), "creationTimestamp": None,
                "annotations": {"k8s.io/initial-events-end": "true"}}})
        last_bookmark = time.monotonic()
        expired = False
        now = time.monotonic()
        while True:
            for typ, o in pending:
                if selected(o, labels, fields):
                    self._event(typ, d.with_kind(res, o))
            pending = []
            now = time.monotonic()
            if now >= end:
                break
            if bookmarks and now - last_bookmark >= BOOKMARK_S:
                self._event("BOOKMARK", {"kind": kind, "apiVersion": gv,
                                         "metadata": {"resourceVersion": str(cur), "creationTimestamp": None}})
                last_bookmark = now
            with store.lock:
                store.lock.wait_for(lambda: store.rv > cur or store.generation != gen,
                                    timeout=min(end - now, BOOKMARK_S if bookmarks else 1.0))
                if store.generation != gen:
                    expired = store.expire_generation == store.generation
                    break
                got = store.since(res, cur)
                if got is None:
                    expired = True
                    break
                pending, cur = [(t, o) for _, _, t, o in got[0]], got[1]
        if expired:
            self._event("ERROR", status(410, "Expired", f"too old resource version: {cur} ({store.oldest})"))
        self._end_stream()

    def _event(self, typ, obj):
        self._chunk(json.dumps({"type": typ, "object": obj}).encode() + b"\n")

    def _log(self, name):
        d = self.d
        pod = d.store.get("pods", name)
        run = d.kubelet.get(name)
        if pod is None or run is None:
            return self._fail(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        if not pod["spec"].get("nodeName"):
            return self._fail(400, "BadRequest", f"pod {name} does not have a host assigned")
        cname = self.q.get("container")
        regular = [c.name for c in run.containers if not c.init]
        inits = [c.name for c in run.containers if c.init]
        if not cname:
            if len(regular) == 1 and not inits:
                cname = regular[0]
            else:
                msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(regular)}]"
                if inits:
                    msg += f" or one of the init containers: [{' '.join(inits)}]"
                return self._fail(400, "BadRequest", msg)
        c = next((c for c in run.containers if c.name == cname), None)
        if c is None:
            return self._fail(400, "BadRequest", f"container {cname} is not valid for pod {name}")
        if self.q.get("previous") in ("true", "1"):
            return self._fail(400, "BadRequest", f'previous terminated container "{cname}" in pod "{name}" not found')
        if c.log is None:
            w = c.state.get("waiting") or {}
            why = {"ErrImagePull": "trying and failing to pull image",
                   "ImagePullBackOff": "image can't be pulled"}.get(w.get("reason"), w.get("reason", "ContainerCreating"))
            return self._fail(400, "BadRequest", f'container "{cname}" in pod "{name}" is waiting to start: {why}')
        try:
            limit = int(self.q["limitBytes"]) if "limitBytes" in self.q else None
            if limit is not None and limit <= 0:
                raise ValueError
        except ValueError:
            return self._fail(422, "Invalid", f'PodLogOptions "{name}" is invalid: limitBytes: Invalid value: '
                              f'{self.q.get("limitBytes")}: must be greater than 0')
        follow = self.q.get("follow") in ("true", "1")
        self._start_stream("text/plain")
        sent = 0
        log = c.log
        while True:
            with log.cv:
                if follow:
                    log.cv.wait_for(lambda: len(log.data) > sent or log.done, timeout=1.0)
                chunk = bytes(log.data[sent:])
                done = log.done
            if limit is not None:
                chunk = chunk[:limit - sent]
            self._chunk(chunk)
            sent += len(chunk)
            if (limit is not None and sent >= limit) or not follow or (done and sent >= len(log.data)) or d.stopping:
                break
        self._end_stream()

    # ------------------------------------------------------------ control
    def _control(self, method, path):
        d = self.d
        if path == "/_double/fault" and method == "POST":
            try:
                f = json.loads(self._body() or b"{}")
                d.fault(f)
            except (ValueError, KeyError, TypeError) as e:
                return self._send(400, {"error": str(e)})
            return self._send(200, {"ok": True})
        if path == "/_double/pods" and method == "GET":
            return self._send(200, d.pods_info())
        if path == "/_double/requests" and method == "GET":
            with d.lock:
                return self._send(200, list(d.requests))
        if path == "/_double/info" and method == "GET":
            return self._send(200, d.info())
        return self._send(404, {"error": "no such control endpoint"})
