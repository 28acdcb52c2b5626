#!/usr/bin/python3
"""Writes the hand-made seeds of the fuzz targets into tests/fuzz/corpus/NAME/.

Seeds are named seed-*; libFuzzer's merges add files named by their SHA-1
beside them (make fuzz-merge). Run again after changing a seed; it rewrites
only the seed-* files. The seeds of image-import, dns, helper-events,
run-body and piston-body are made by their own scripts beside this one.
"""
import io
import json
import os
import struct
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def client_hello(name, extra_ext=b""):
    """A TLS 1.2-framed ClientHello asking for NAME (b"" for no server_name)."""
    exts = b""
    if name:
        sn = b"\x00" + struct.pack(">H", len(name)) + name
        sni = struct.pack(">H", len(sn)) + sn
        exts += b"\x00\x00" + struct.pack(">H", len(sni)) + sni
    exts += extra_ext
    body = b"\x03\x03" + b"A" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def proxy_head():
    t = "proxy-head"
    write(t, "connect", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n")
    write(t, "get", "GET http://allowed.example/path?q=1 HTTP/1.1\r\nHost: evil.example\r\nAccept: */*\r\n"
          "Proxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\n")
    write(t, "post", "POST http://allowed.example:8080/up HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
    write(t, "chunked", "POST http://allowed.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    write(t, "two-lengths", "POST http://allowed.example/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
    write(t, "mapped", "CONNECT [::ffff:169.254.169.254]:443 HTTP/1.1\r\n\r\nCONNECT evil:443 HTTP/1.1\r\n\r\n")
    write(t, "userinfo", "GET http://user@allowed.example@evil.net/ HTTP/1.0\r\n\r\n")
    write(t, "query-only", "GET http://allowed.example?x HTTP/1.1\r\n\r\n")
    write(t, "https-absolute", "GET https://allowed.example/ HTTP/1.1\r\n\r\n")
    write(t, "origin-form", "GET / HTTP/1.1\r\nHost: allowed.example\r\n\r\n")
    write(t, "bare-lf", "GET http://allowed.example/ HTTP/1.1\nHost: x\n\n")
    write(t, "incomplete", "CONNECT allowed.example:443 HTTP/1.1\r\nHost: a")
    write(t, "folded", "GET http://allowed.example/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n")
    write(t, "hex-host", "GET http://0x7f.1:80/ HTTP/1.1\r\n\r\n")
    write(t, "v6-zone", "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n")


def sni():
    t = "sni"
    write(t, "name", client_hello(b"allowed.example"))
    write(t, "upper", client_hello(b"Allowed.EXAMPLE"))
    write(t, "none", client_hello(b""))
    write(t, "alpn-then-name", client_hello(b"a.example", b"\x00\x10\x00\x05\x00\x03\x02h2"))
    write(t, "cut", client_hello(b"allowed.example")[:40])
    write(t, "ip-name", client_hello(b"169.254.169.254"))
    write(t, "nul-name", client_hello(b"a\x00b.example"))
    write(t, "not-tls", b"GET / HTTP/1.1\r\n\r\n")


def addr():
    t = "addr"
    for i, s in enumerate(["allowed.example", "ALLOWED.Example.", "0xa9fea9fe", "0xa9fea9fe.", "0x4.", "127.1",
                           "169.254.43518", "017700000001", "1.2.3.4.5", "[::ffff:169.254.169.254]",
                           "[fe80::1%eth0]", "::1", "a.b.c,d.e", "*.example", "localhost", "x.localhost",
                           "a-.example", "_dmarc.example", "a..b", "pypi.org,files.pythonhosted.org",
                           "xn--bcher-kva.example", "1e100.net", "a" * 64 + ".example",
                           "1.1.1.1", "8.8.8.8", "93.184.216.34", "[2606:4700::1111]", "[::ffff:8.8.8.8]",
                           "[2002:0808:0808::1]", "[64:ff9b::a9fe:a9fe]", "[::a9fe:a9fe]", "100.100.100.200",
                           "[fd00:ec2::254]", "0x08080808", "010.010.010.010"]):
        write(t, "%02d" % i, s)


def mcp():
    t = "mcp"
    write(t, "initialize", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}))
    write(t, "initialized", '{"jsonrpc":"2.0","method":"notifications/initialized"}')
    write(t, "tools-call", json.dumps({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {
        "name": "code_execution", "arguments": {"language": "python", "code": "print(1)"},
        "_meta": {"progressToken": 7}}}))
    write(t, "response", '{"jsonrpc":"2.0","id":5,"result":{}}')
    write(t, "cancelled", '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}')
    write(t, "batch", '[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    # the parser's error text quotes the bad token, cut inside a character
    write(t, "cut-utf8", b'{"jsonrpc":"2.0","id":1,"method":"\\u\xc3\xa9')
    write(t, "long-method", '{"jsonrpc":"2.0","id":1,"method":"' + "m" * 300 + '"}')
    write(t, "old-version", '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05"}}')
    write(t, "not-utf8", b'{"jsonrpc":"2.0","id":"\xff","method":"ping"}')


MANIFESTS = [
    {"name": "s", "version": "1.0", "description": "d", "entrypoints": [{
        "name": "e", "language": "python", "script": "e.py", "description": "d",
        "input_schema": {"type": "object", "required": ["a"], "additionalProperties": False, "properties": {
            "a": {"type": "string", "maxLength": 3, "enum": ["x", "yy"]},
            "n": {"type": "integer", "minimum": 1, "maximum": 9},
            "l": {"type": "array", "maxItems": 2, "items": {"type": "number"}}},
            "examples": [{"a": "x"}, {"a": "yy", "n": 3, "l": [1.5]}, {"a": 1}, {}]}}]},
    {"name": "t-2", "version": "2", "description": "d", "image": "host", "entrypoints": [{
        "name": "a", "language": "bash", "script": "lib/a.sh", "description": "d", "timeout_s": 5,
        "input_schema": {"type": "object", "properties": {"o": {"type": "object", "properties": {
            "b": {"type": "boolean"}}}}, "examples": [{"o": {"b": True}}, {"o": []}]}}]},
]


def skill_manifest():
    t = "skill-manifest"
    for i, m in enumerate(MANIFESTS):
        write(t, "valid-%d" % i, json.dumps(m))
    bad = json.loads(json.dumps(MANIFESTS[0]))
    bad["entrypoints"][0]["script"] = "../e.py"
    write(t, "traversal", json.dumps(bad))
    write(t, "duplicate-key", '{"name": "s", "name": "t"}')
    write(t, "bad-name", json.dumps(dict(MANIFESTS[1], name="Bad Name")))


def tar_bytes(entries, fmt=tarfile.USTAR_FORMAT):
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tf:
        for e in entries:
            ti = tarfile.TarInfo(e["name"])
            ti.type = e.get("type", tarfile.REGTYPE)
            ti.mode = e.get("mode", 0o755 if ti.type == tarfile.DIRTYPE else 0o644)
            ti.linkname = e.get("link", "")
            data = e.get("data", b"")
            ti.size = len(data) if ti.type == tarfile.REGTYPE else 0
            tf.addfile(ti, io.BytesIO(data) if ti.size else None)
    return bio.getvalue()


def skill_bundle():
    t = "skill-bundle"
    good = json.dumps(MANIFESTS[1]).encode()
    write(t, "good", tar_bytes([{"name": "skill.json", "data": good}, {"name": "lib/", "type": tarfile.DIRTYPE},
                                {"name": "lib/a.sh", "data": b"echo hi\n", "mode": 0o755}]))
    write(t, "links-devices", tar_bytes([{"name": "./x", "data": b"x"},
                                         {"name": "l", "type": tarfile.SYMTYPE, "link": "/etc/passwd"},
                                         {"name": "h", "type": tarfile.LNKTYPE, "link": "x"},
                                         {"name": "d", "type": tarfile.CHRTYPE}]))
    write(t, "traversal", tar_bytes([{"name": "a/../../b", "data": b"b"}, {"name": "/abs", "data": b"c"}]))
    write(t, "deep", tar_bytes([{"name": "1/2/3/4/5/6/7/8", "data": b"d"},
                                {"name": "1/2/3/4/5/6/7/8/9/x", "data": b"e"}]))
    # a valid bundle with an empty directory at the deepest level allowed
    # (the old mutation loop's tree check aborted on it)
    write(t, "empty-dir-8-deep", tar_bytes([{"name": "skill.json", "data": good},
                                            {"name": "1/2/3/4/5/6/7/8/", "type": tarfile.DIRTYPE}]))
    write(t, "setuid", tar_bytes([{"name": "s", "data": b"s", "mode": 0o4755}]))
    write(t, "pax-long", tar_bytes([{"name": "p" * 200, "data": b"p"}], tarfile.PAX_FORMAT))


def dlp():
    t = "dlp"
    write(t, "aws", b"\x00\x07key AKIAIOSFODNN7EXAMPLE and more\n")
    write(t, "secret-key", b"\x01\x02aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYab\n")
    write(t, "bearer", b"\x02\x03Authorization: Bearer abcdefgh12345678\nnext line\n")
    write(t, "github", b"\x03\x01token=ghp_abcdefghijklmnopqrstuvwxyz0123\r\n")
    write(t, "api-key", b"\x04\x05risk-assessment-summary sk-abcdefghijklmnopqrstuv\n")
    write(t, "url", b"\x05\x06postgres://user:hunter2@db.example/x\n")
    write(t, "private-key", b"\x06\x07a\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nxyz\n-----END RSA PRIVATE KEY-----\nb\n")
    write(t, "custom", b"\x07\x08ticket INTERNAL-123456 open\n")
    write(t, "nul", b"\x08\x09a\x00b\n")
    write(t, "bytes", b"\x09\x0a\xff\xfe caf\xc3\xa9 \xe2\x82\n\xed\xa0\x80 \xf4\x90\x80\x80\n")
    write(t, "no-newline", b"\x0a\x0bslack xoxb-1234567890-abcdef")
    write(t, "google", b"\x0b\x0cAIzaSyA-1234567890abcdefghijklmnopqrstu\n")
    write(t, "plain", b"\x0c\x0dhello world\n")


def names():
    t = "names"
    for i, s in enumerate([b"chart.png", b"caf\xc3\xa9.txt", b"\x80", b"\xef\xbf\xbd", b"a\\x80", b"a\\\\b",
                           b"\xe2\x80\xaeevil.txt", b"tab\tname", b"\x7f", b"\xc2\x85", b"\xed\xa0\x80",
                           b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xf0\x9f\x98\x80.png", b"\xe2\x81\xa6x"]):
        write(t, "%02d" % i, s)


def text():
    t = "text"
    for i, s in enumerate([b"0", b"18446744073709551615", b"18446744073709551616", b"64K", b"1mb", b"16777216T",
                           b"b", b"1.5", b".25", b"3.", b"1.2345", b"0007", b"-1", b"1e3",
                           b"caf\xc3\xa9", b"\xff\xfe", b"ab\xe2\x82", b"\xed\xa0\x80", b"a\x00b\xc3"]):
        write(t, "%02d" % i, s)


def settings():
    t = "settings"
    bodies = [
        {"approval_policy": "always", "approval_ttl_s": 600, "allow_self_approval": True},
        {"network_allowed": ["offline", "packages", "hosts", "internet"], "network": "internet"},
        {"network_hosts": ["Allowed.Example.", "b.example"], "network": "hosts:allowed.example"},
        {"network": "hosts+packages:a.example", "network_hosts": ["a.example"]},
        {"timeout_s": 30, "max_timeout_s": 120, "memory_mb": 1024, "cpus": 1.5, "concurrency": 2},
        {"dlp_patterns": [{"name": "ticket", "pattern": "INTERNAL-[0-9]{6}"}, {"name": "x", "pattern": "(a+)+$"}]},
        {"secrets": {"API_TOKEN": "s3cr3t", "OLD": None}},
        {"tools": ["code_execution"], "driver": "disabled"},
        {"price_per_run": 7},
        {"price_per_run": 0},
        {"network_allowed": ["internet"]},
        {"network_hosts": ["0xa9fea9fe."]},
        {"dlp_patterns": [{"name": "Bad Name", "pattern": "("}]},
        {"unknown": 1},
    ]
    for i, b in enumerate(bodies):
        write(t, "%02d" % i, json.dumps(b))
    # two PUTs: the second over the first
    write(t, "two-puts", json.dumps(bodies[2]).encode() + b"\xff" + json.dumps({"network_hosts": []}).encode())
    write(t, "two-puts-b", json.dumps(bodies[1]).encode() + b"\xff" + json.dumps({"network_allowed": ["offline"]}).encode())


def collect():
    """Trees for fuzz-collect: [kind][name length][name][data length][data]
    per entry; kinds 0 file, 1 directory, 2 symlink, 3 FIFO, 4 hard link,
    5 sparse file of N MiB, 6 file whose first two data bytes are its mode."""
    t = "collect"

    def e(kind, name, data=b""):
        name = name if isinstance(name, bytes) else name.encode()
        data = data if isinstance(data, bytes) else data.encode()
        return bytes([kind, len(name)]) + name + bytes([len(data)]) + data

    write(t, "plain", e(0, "chart.png", "PNG") + e(0, "report/summary.txt", "ok") + e(1, "empty"))
    write(t, "links", e(0, "a", "secret") + e(2, "l", "/etc/passwd") + e(2, "m", "a") + e(4, "h", "a") + e(3, "fifo"))
    write(t, "names", e(0, b"\x80", "x") + e(0, b"\xef\xbf\xbd", "y") + e(0, b"\xe2\x80\xaeevil", "z")
          + e(0, "caf\u00e9", "w") + e(0, b"a\\b", "v"))
    write(t, "deep", e(0, "1/2/3/4/5/6/f", "deep") + e(0, "1/2/3/f", "ok") + e(1, "1/2/3/4/5"))
    write(t, "caps", b"".join(e(0, "f%02d" % i, "x" * 200) for i in range(20)))
    write(t, "big", e(5, "sparse", bytes(2)) + e(0, "small", "s") + e(5, "huge", bytes(255)))
    write(t, "modes", e(6, "suid", bytes([0o4755 & 0xff, 0o4755 >> 8])) + e(6, "ro", bytes([0, 1])) + e(6, "none", bytes([0, 0])))
    write(t, "dotdot", e(0, "../escape", "x") + e(0, "./a/../b", "y") + e(0, "ok", "z"))


def kube_watch():
    """Watch streams for fuzz-kube-watch: a chunk-size byte, then
    newline-delimited events as the API server sends them on a pod."""
    t = "kube-watch"

    def ev(typ, obj):
        return json.dumps({"type": typ, "object": obj}).encode() + b"\n"

    def pod(rv, phase="Pending", main=None, reason=None, conds=None, waiting=None):
        st = {"phase": phase}
        if reason:
            st["reason"] = reason
        if conds:
            st["conditions"] = conds
        cs = []
        if main:
            cs.append({"name": "main", "state": main})
        if waiting:
            cs.append({"name": "collect", "state": {"waiting": {"reason": waiting, "message": "pull failed"}}})
        if cs:
            st["containerStatuses"] = cs
        return {"kind": "Pod", "metadata": {"name": "airlock-0123456789abcdef", "resourceVersion": rv}, "status": st}

    run = (ev("ADDED", pod("1")) + ev("MODIFIED", pod("2", "Running", {"running": {"startedAt": "x"}}))
           + ev("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "3"}})
           + ev("MODIFIED", pod("4", "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}})))
    write(t, "run", b"\x07" + run)
    write(t, "oom", b"\x00" + ev("MODIFIED", pod("5", "Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}})))
    write(t, "deadline", b"\x10" + ev("MODIFIED", pod("6", "Failed", None, "DeadlineExceeded")))
    write(t, "pull", b"\x03" + ev("MODIFIED", pod("7", waiting="ImagePullBackOff")))
    write(t, "unsched", b"\x20" + ev("ADDED", pod("8", conds=[{"type": "PodScheduled", "status": "False",
                                                                 "reason": "Unschedulable", "message": "0/3 nodes"}])))
    write(t, "expired", b"\x01" + ev("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"}))
    write(t, "deleted", b"\x05" + ev("DELETED", pod("9", "Running", {"running": {}})))
    write(t, "garbage", b"\x02" + b'{"type":"ADDED"}\n' + b"not json\n" + ev("WHAT", {}))


def kube_log():
    """Collect sidecar logs for fuzz-kube-log: a chunk-size byte, then the
    log: ready, the begin marker, a base64 tar of /out, the end marker."""
    import base64
    t = "kube-log"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in (("./result.txt", b"42\n"), ("./sub/plot.csv", b"a,b\n1,2\n")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("./link")
        ti.type = tarfile.SYMTYPE
        ti.linkname = "/etc/passwd"
        tf.addfile(ti)
        ti = tarfile.TarInfo("./../escape")
        ti.size = 1
        tf.addfile(ti, io.BytesIO(b"x"))
    b64 = base64.encodebytes(buf.getvalue())
    log = b"airlock-collect-ready\nairlock-out-begin\n" + b64 + b"airlock-out-end 0\n"
    write(t, "tar", b"\x40" + log)
    write(t, "failed", b"\x00" + b"airlock-collect-ready\nairlock-out-begin\nAAAA\nairlock-out-end 2\n")
    write(t, "cut", b"\x05" + b"airlock-out-begin\n" + b64[: len(b64) // 2])
    write(t, "pad", b"\x03" + b"airlock-out-begin\nQQ==\nQUI=\nairlock-out-end 0\n")
    write(t, "bad", b"\x01" + b"airlock-out-begin\nQ$==\nairlock-out-end 0\n")


TARGETS = {"proxy-head": proxy_head, "sni": sni, "addr": addr, "mcp": mcp, "skill-manifest": skill_manifest,
           "skill-bundle": skill_bundle, "dlp": dlp, "names": names, "text": text, "settings": settings, "collect": collect,
           "kube-watch": kube_watch, "kube-log": kube_log}

if __name__ == "__main__":
    for name in sys.argv[1:] or TARGETS:
        TARGETS[name]()
