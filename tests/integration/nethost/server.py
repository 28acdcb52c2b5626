"""Test hosts for the network battery, run inside their own network
namespace: an HTTP server on :80, an HTTPS server on :443 (a certificate
for every test name, from the test CA), and an authoritative DNS server on
:53 whose query log proves which names were ever looked up.

Usage: server.py STATE_DIR   (writes dns.log, http.log; prints "ready")
"""
import http.server
import json
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
from urllib.parse import parse_qs, urlparse

STATE = sys.argv[1]
PUBLIC = "198.18.0.3"      # allowed.test, cdn.test, redirect.test
OTHER = "198.18.0.4"       # other.test: a host no allow-list names
PKG = "198.18.0.5"         # the package registries' names
PRIVATE = "10.255.0.2"     # a private address that does answer (the control run reaches it)

A = {
    "allowed.test": [PUBLIC], "cdn.test": [PUBLIC], "redirect.test": [PUBLIC],
    "other.test": [OTHER], "private.test": [PRIVATE],
    "pypi.org": [PKG], "files.pythonhosted.org": [PKG], "registry.npmjs.org": [PKG],
    "loopback.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"],
    "mixed.test": [PRIVATE, PUBLIC], "metadata.google.internal": ["169.254.169.254"],
}
AAAA = {"mapped.test": ["::ffff:169.254.169.254"], "ula.test": ["fd00:ec2::254"]}
# rebind.test answers public, then private, in turn, with TTL 0
REBIND = ["198.18.0.3", "127.0.0.1", "198.18.0.3", "10.255.0.2", "198.18.0.3", "169.254.169.254"]
rebind_n = 0
lock = threading.Lock()


def log(name, rec):
    with lock, open(os.path.join(STATE, name), "a") as f:
        f.write(json.dumps(rec) + "\n")


def dns_answer(q):
    global rebind_n
    tid, flags, qd = struct.unpack(">HHH", q[:6])
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace"))
        i += 1 + q[i]
    qname = ".".join(labels).lower()
    qtype, _qclass = struct.unpack(">HH", q[i + 1:i + 5])
    question = q[12:i + 5]
    log("dns.log", {"name": qname, "type": qtype})
    addrs, ttl = [], 60
    if qtype == 1:
        if qname == "rebind.test":
            with lock:
                addrs = [REBIND[rebind_n % len(REBIND)]]
                rebind_n += 1
            ttl = 0
        else:
            addrs = A.get(qname, [])
    elif qtype == 28:
        addrs = AAAA.get(qname, [])
    known = qname in A or qname in AAAA or qname == "rebind.test"
    rcode = 0 if known else 3
    ans = b""
    for a in addrs:
        rdata = socket.inet_pton(socket.AF_INET if qtype == 1 else socket.AF_INET6, a)
        ans += struct.pack(">HHHIH", 0xC00C, qtype, 1, ttl, len(rdata)) + rdata
    head = struct.pack(">HHHHHH", tid, 0x8400 | rcode, 1, len(addrs), 0, 0)
    return head + question + ans


def dns_serve(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    while True:
        q, peer = s.recvfrom(4096)
        try:
            s.sendto(dns_answer(q), peer)
        except Exception as e:  # a malformed query gets no answer
            log("dns.log", {"error": str(e)})


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, code, body, headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        local = self.connection.getsockname()[0]
        log("http.log", {"local": local, "host": self.headers.get("Host"), "path": self.path,
                         "tls": isinstance(self.connection, ssl.SSLSocket)})
        u = urlparse(self.path)
        www = os.path.realpath(os.path.join(STATE, "www"))
        f = os.path.realpath(os.path.join(www, u.path.lstrip("/")))
        if f.startswith(www + "/") and os.path.isfile(os.path.join(f, "index.html") if os.path.isdir(f) else f):
            data = open(os.path.join(f, "index.html") if os.path.isdir(f) else f, "rb").read()
            return self.answer(200, data, [("Content-Type", "text/html" if f.endswith("/") or os.path.isdir(f) else "application/octet-stream")])
        if u.path == "/redirect-private":
            return self.answer(302, b"moved\n", [("Location", "http://169.254.169.254/latest/meta-data/")])
        if u.path == "/bytes":
            n = int(parse_qs(u.query).get("n", ["1024"])[0])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            while n > 0:
                self.wfile.write(chunk[:min(n, len(chunk))])
                n -= min(n, len(chunk))
            return
        self.answer(200, f"hello from {local} host={self.headers.get('Host')} path={self.path}\n".encode())

    do_PUT = do_POST = do_GET


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    http_srv = Server(("0.0.0.0", 80), Handler)
    https_srv = Server(("0.0.0.0", 443), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(STATE, "server.pem"), os.path.join(STATE, "server.key"))
    https_srv.socket = ctx.wrap_socket(https_srv.socket, server_side=True)
    for target in (http_srv.serve_forever, https_srv.serve_forever, lambda: dns_serve("198.18.0.2")):
        threading.Thread(target=target, daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


main()
