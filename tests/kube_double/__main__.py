"""kube_double: a TEST DOUBLE of a Kubernetes API server and one node's
kubelet, for airlock's kubernetes driver tests. Never a cluster to use.

    python3 tests/kube_double --state DIR --docker SOCK [--namespace NS] [--port N]
        [--pids-limit N] [--seccomp-root DIR] [--registry HOST:PORT]

It writes DIR/ready.json ({"url", "port", "kubeconfig", ...}) once it
serves, DIR/kubeconfig (server, CA data, user.tokenFile DIR/token) and
DIR/kubeconfig-cert (a client certificate instead), and stops on SIGTERM,
removing every container, volume and network it made. See README.md for
what it proves and what it does not."""
import argparse
import collections
import copy
import datetime
import json
import os
import secrets
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import api  # noqa: E402
from dockerapi import Docker, DockerError  # noqa: E402
from kubelet import Kubelet  # noqa: E402
from store import Store  # noqa: E402

VERSION = {"major": "1", "minor": "35", "gitVersion": "v1.35.0-kube-double", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
           "platform": "linux/amd64"}


def discovery(port):
    def res(name, kind, verbs, short=None, namespaced=True, singular=""):
        r = {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs}
        if short:
            r["shortNames"] = short
        return r
    rw = ["create", "delete", "get", "list", "watch"]
    v1 = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        res("namespaces", "Namespace", ["get"], ["ns"], False, "namespace"),
        res("pods", "Pod", rw, ["po"], singular="pod"), res("pods/log", "Pod", ["get"]),
        res("secrets", "Secret", rw, singular="secret")]}
    net = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "networking.k8s.io/v1", "resources": [
        res("networkpolicies", "NetworkPolicy", rw, ["netpol"], singular="networkpolicy")]}
    gv = {"groupVersion": "networking.k8s.io/v1", "version": "v1"}
    group = {"name": "networking.k8s.io", "versions": [gv], "preferredVersion": gv}

    def op_doc(prefix, res_name, kind, group_name):
        # just what kubectl's field-validation verifier reads: a PATCH of
        # the kind that takes fieldValidation
        gvk = {"group": group_name, "version": "v1", "kind": kind}
        return {f"{prefix}/namespaces/{{namespace}}/{res_name}/{{name}}": {"patch": {
            "operationId": f"patch{kind}", "x-kubernetes-group-version-kind": gvk,
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "OK"}}}}}
    oa_v1 = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.35.0"},
             "paths": {**op_doc("/api/v1", "pods", "Pod", ""), **op_doc("/api/v1", "secrets", "Secret", "")}}
    oa_net = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.35.0"},
              "paths": op_doc("/apis/networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", "networking.k8s.io")}
    return {
        "/version": VERSION,
        "/api": {"kind": "APIVersions", "versions": ["v1"],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]},
        "/api/v1": v1,
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]},
        "/apis/networking.k8s.io": {"kind": "APIGroup", "apiVersion": "v1", **group},
        "/apis/networking.k8s.io/v1": net,
        "/openapi/v3": {"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=1"},
                                  "apis/networking.k8s.io/v1": {
                                      "serverRelativeURL": "/openapi/v3/apis/networking.k8s.io/v1?hash=1"}}},
        "/openapi/v3/api/v1": oa_v1,
        "/openapi/v3/apis/networking.k8s.io/v1": oa_net,
    }


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1/localhost and a client one, by openssl."""
    def run(*a):
        subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=d)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=kube-double-ca", "-keyout", "ca.key", "-out", "ca.crt")
    for who, subj, ext in (("server", "/CN=kube-apiserver",
                            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
                           ("client", "/O=airlock/CN=airlock-driver", "extendedKeyUsage=clientAuth")):
        (d / f"{who}.ext").write_text(ext + "\n")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", subj,
            "-keyout", f"{who}.key", "-out", f"{who}.csr")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{who}.ext", "-out", f"{who}.crt")


def b64(p):
    import base64
    return base64.b64encode(Path(p).read_bytes()).decode()


class Double:
    def __init__(self, args):
        self.state = Path(args.state).resolve()
        self.namespace = args.namespace
        self.store = Store()
        self.docker = Docker(args.docker)
        self.lock = threading.Lock()
        self.requests = collections.deque(maxlen=5000)
        self.faults = {}
        self.n500 = 0
        self.n410 = 0
        self.down_until = 0.0
        self.stopping = False
        self.token = secrets.token_hex(24)
        self.token_file = self.state / "token"
        self._write_token()
        self.port = None
        self.network = None
        self.args = args

    def log(self, msg):
        print(f"{datetime.datetime.now():%H:%M:%S.%f} {msg}", file=sys.stderr, flush=True)

    def _write_token(self):
        tmp = self.token_file.with_suffix(".tmp")
        tmp.write_text(self.token + "\n")
        os.replace(tmp, self.token_file)

    def record(self, r):
        with self.lock:
            self.requests.append(r)

    def take_500(self):
        with self.lock:
            if self.n500 > 0:
                self.n500 -= 1
                return True
            return False

    def take_watch_410(self):
        with self.lock:
            if self.n410 > 0:
                self.n410 -= 1
                return True
            return False

    def fault(self, f):
        known = {"unreachable_s", "status_500", "end_watches", "expire_watches", "watch_410", "delete_pod",
                 "rotate_token", "unschedulable"}
        bad = set(f) - known
        if bad:
            raise KeyError(f"unknown fault {sorted(bad)}; known: {sorted(known)}")
        with self.lock:
            if "unreachable_s" in f:
                self.down_until = time.monotonic() + float(f["unreachable_s"])
            if "status_500" in f:
                self.n500 = int(f["status_500"])
            if "watch_410" in f:
                self.n410 = int(f["watch_410"])
            if "unschedulable" in f:
                self.faults["unschedulable"] = bool(f["unschedulable"])
            if f.get("rotate_token"):
                self.token = secrets.token_hex(24)
                self._write_token()
        if f.get("end_watches") or f.get("expire_watches"):
            self.store.end_watches(expire=bool(f.get("expire_watches")))
        if f.get("delete_pod"):
            o = self.store.get("pods", f["delete_pod"])
            if o is None:
                raise KeyError(f'pods "{f["delete_pod"]}" not found')
            self.delete_pod(f["delete_pod"], o["spec"].get("terminationGracePeriodSeconds", 30))
        self.kubelet.wake()

    def delete_pod(self, name, grace):
        def mark(o):
            if "deletionTimestamp" not in o["metadata"]:
                t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=grace)
                o["metadata"]["deletionTimestamp"] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
                o["metadata"]["deletionGracePeriodSeconds"] = grace
        o = self.store.update("pods", name, mark)
        if grace == 0:
            self.store.delete("pods", name)
        self.kubelet.delete(name, grace)
        return o

    def with_kind(self, res, o):
        o = copy.deepcopy(o)
        kind, gv, _ = api.RESOURCES[res]
        return {"kind": kind, "apiVersion": gv, **o}

    def namespace_object(self):
        return {"kind": "Namespace", "apiVersion": "v1", "metadata": {
            "name": self.namespace, "uid": "00000000-0000-0000-0000-000000000001", "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kubernetes.io/metadata.name": self.namespace,
                       "pod-security.kubernetes.io/enforce": "restricted",
                       "pod-security.kubernetes.io/enforce-version": "latest"}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}

    def pods_info(self):
        out = []
        for o in self.store.list("pods")[0]:
            name = o["metadata"]["name"]
            run = self.kubelet.get(name)
            out.append({"name": name, "phase": (o.get("status") or {}).get("phase"),
                        "deleting": "deletionTimestamp" in o["metadata"],
                        "containers": {c.name: c.cid for c in run.containers} if run else {},
                        "network": run.net if run else None})
        return out

    def info(self):
        gw = None
        if self.network:
            n = self.docker.call("GET", f"/networks/{self.network}")
            cfg = ((n.get("IPAM") or {}).get("Config") or [{}])[0]
            gw = cfg.get("Gateway")
        return {"url": f"https://127.0.0.1:{self.port}", "namespace": self.namespace, "network": self.network,
                "gateway": gw, "pids_limit": self.args.pids_limit, "token_file": str(self.token_file)}

    def kubeconfig(self, path, user):
        cluster = {"server": f"https://127.0.0.1:{self.port}", "certificate-authority-data": b64(self.state / "ca.crt")}
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "kube-double",
               "clusters": [{"name": "kube-double", "cluster": cluster}],
               "contexts": [{"name": "kube-double", "context": {"cluster": "kube-double", "user": "airlock",
                                                                 "namespace": self.namespace}}],
               "users": [{"name": "airlock", "user": user}]}
        # JSON is YAML: any kubeconfig reader takes it
        path.write_text(json.dumps(doc, indent=2) + "\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, double, port, ctx):
        self.double, self.ctx = double, ctx
        self.conns = set()
        super().__init__(("127.0.0.1", port), api.Handler)

    def get_request(self):
        conn, addr = self.socket.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = self.ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        with self.double.lock:
            self.conns.add(conn)
        return conn, addr

    def shutdown_request(self, request):
        with self.double.lock:
            self.conns.discard(request)
        super().shutdown_request(request)

    def drop_connections(self):
        """An unreachable server breaks the connections a client keeps too."""
        with self.double.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        e = sys.exc_info()[1]
        if not isinstance(e, (ssl.SSLError, ConnectionError, TimeoutError, OSError)):
            super().handle_error(request, client_address)

    def loop(self):
        """serve_forever, but refusing connections while the fault says so
        (the listening socket closed, then bound again on the same port)."""
        addr = self.server_address
        while not self.double.stopping:
            if time.monotonic() < self.double.down_until:
                if self.socket.fileno() >= 0:
                    self.socket.close()
                    self.drop_connections()
                time.sleep(0.05)
                continue
            if self.socket.fileno() < 0:
                self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self.socket.bind(addr)
                self.socket.listen(self.request_queue_size)
            r, _, _ = select.select([self.socket], [], [], 0.2)
            if r:
                self._handle_request_noblock()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--state", required=True)
    p.add_argument("--docker", required=True, help="dockerd's unix socket")
    p.add_argument("--namespace", default="airlock-sandbox")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--pids-limit", type=int, default=1024, help="the kubelet's podPidsLimit")
    p.add_argument("--seccomp-root", help="the kubelet's seccomp root (/var/lib/kubelet/seccomp), where a "
                   "Localhost profile is read; default STATE/seccomp")
    a = p.parse_args()
    state = Path(a.state)
    state.mkdir(parents=True, exist_ok=True)
    d = Double(a)
    make_certs(state)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(state / "server.crt", state / "server.key")
    ctx.load_verify_locations(state / "ca.crt")
    ctx.verify_mode = ssl.CERT_OPTIONAL
    srv = Server(d, a.port, ctx)
    d.port = srv.server_address[1]
    api.Handler.d = d
    d.discovery = discovery(d.port)
    d.network = f"kube-double-{d.port}"
    try:
        d.docker.call("POST", "/networks/create", {"Name": d.network, "Driver": "bridge", "CheckDuplicate": True,
                                                   "Labels": {"kube-double": str(d.port)}})
    except DockerError as e:
        if e.status != 409:
            raise
    d.kubelet = Kubelet(d.store, d.docker, state, d.port, d.namespace, d.network, a.pids_limit, d.faults, d.log)
    if a.seccomp_root:
        d.kubelet.seccomp_root = Path(a.seccomp_root).resolve()
    d.kubeconfig(state / "kubeconfig", {"tokenFile": str(d.token_file)})
    d.kubeconfig(state / "kubeconfig-cert", {"client-certificate-data": b64(state / "client.crt"),
                                             "client-key-data": b64(state / "client.key")})

    def stop(*_):
        d.stopping = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ready = {"url": f"https://127.0.0.1:{d.port}", "port": d.port, "namespace": d.namespace,
             "kubeconfig": str(state / "kubeconfig"), "kubeconfig_cert": str(state / "kubeconfig-cert"),
             "token_file": str(d.token_file), "ca": str(state / "ca.crt"), "network": d.network, "pid": os.getpid(),
             "seccomp_root": str(d.kubelet.seccomp_root)}
    (state / "ready.json.tmp").write_text(json.dumps(ready))
    os.replace(state / "ready.json.tmp", state / "ready.json")
    d.log(f"kube_double serving {ready['url']} namespace {d.namespace}")
    try:
        srv.loop()
    finally:
        d.kubelet.shutdown()
        try:
            d.docker.call("DELETE", f"/networks/{d.network}", ok=(204, 404))
        except DockerError as e:
            d.log(f"network {d.network}: {e}")
        d.log("kube_double stopped")


if __name__ == "__main__":
    main()
