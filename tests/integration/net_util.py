"""Test hosts for the network tests: a network namespace joined to the host
by a veth pair, holding 198.18.0.2-5 (and the private 10.255.0.2), with
HTTP, HTTPS and an authoritative DNS server (nethost/server.py).

198.18.0.0/15 is the benchmarking range, which the proxy denies. Boxes
reach these hosts only through a test build of airlock (-Dtest_hooks=true,
build-asan) told AIRLOCK_TEST_PUBLIC_NET=198.18.0.0/24; release builds have
no such setting. AIRLOCK_DNS points the proxy at the test nameserver.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from conftest import ROOT, need

NS = "alt-web"
HOST_IF, NS_IF = "alt-h0", "alt-n0"
ASAN_AIRLOCK = Path(os.environ.get("AIRLOCK_TEST_HOOKS_BIN", ROOT / "build-asan" / "airlock"))


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class NetHosts:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="airlock-nethosts-"))
        self.proc = None

    def start(self):
        need(shutil.which("ip") is not None, "iproute2 (ip) is not installed")
        need(shutil.which("openssl") is not None, "openssl is not installed")
        need(ASAN_AIRLOCK.exists(), f"{ASAN_AIRLOCK} (the test-hooks build: make asan) is not built")
        self.stop_net()
        self.make_certs()
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        sh("ip", "link", "set", NS_IF, "netns", NS)
        sh("ip", "addr", "add", "198.18.0.1/24", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh("ip", "route", "add", "10.255.0.2/32", "dev", HOST_IF)
        for a in ("198.18.0.2/24", "198.18.0.3/24", "198.18.0.4/24", "198.18.0.5/24", "10.255.0.2/32"):
            sh("ip", "-n", NS, "addr", "add", a, "dev", NS_IF)
        sh("ip", "-n", NS, "link", "set", NS_IF, "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        sh("ip", "-n", NS, "route", "add", "default", "dev", NS_IF)
        self.proc = subprocess.Popen(["ip", "netns", "exec", NS, "/usr/bin/python3",
                                      str(ROOT / "tests/integration/nethost/server.py"), str(self.dir)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"test hosts did not start: {line!r} {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        return self

    def make_certs(self):
        d = self.dir
        names = ["allowed.test", "cdn.test", "other.test", "redirect.test", "rebind.test", "pypi.org",
                 "files.pythonhosted.org", "registry.npmjs.org"]
        (d / "san.cnf").write_text("subjectAltName=" + ",".join(f"DNS:{n}" for n in names) + "\n")
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=airlock test CA",
           "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allowed.test",
           "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
        sh("openssl", "x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey",
           str(d / "ca.key"), "-CAcreateserial", "-days", "2", "-extfile", str(d / "san.cnf"),
           "-out", str(d / "server.pem"))
        os.chmod(d, 0o755)
        os.chmod(d / "ca.pem", 0o644)

    def env(self, **extra):
        e = dict(os.environ)
        e.update(AIRLOCK_DNS="198.18.0.2:53", AIRLOCK_TEST_PUBLIC_NET="198.18.0.0/24",
                 ASAN_OPTIONS="detect_leaks=1:abort_on_error=1", UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        e.update(extra)
        return e

    def log(self, name):
        p = self.dir / name
        if not p.exists():
            return []
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]

    def clear_logs(self):
        for n in ("dns.log", "http.log"):
            (self.dir / n).unlink(missing_ok=True)

    def run(self, net, code, *extra, lang="python", timeout=120, env=None):
        """`airlock run --json --net NET` (the test-hooks build) with the CA at /work/ca.pem."""
        proc = subprocess.run([str(ASAN_AIRLOCK), "run", "--json", "--net", net, "--in", str(self.dir / "ca.pem"),
                               *extra, "--lang", lang, "-c", code], capture_output=True, timeout=timeout,
                              env=env or self.env())
        try:
            doc = json.loads(proc.stdout)
        except ValueError as e:
            raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stdout[:2000]!r} "
                                 f"stderr={proc.stderr[-3000:]!r}") from e
        assert b"ERROR: AddressSanitizer" not in proc.stderr and b"runtime error" not in proc.stderr, proc.stderr[-4000:]
        return doc

    def stop_net(self):
        sh("ip", "netns", "del", NS, check=False)
        sh("ip", "link", "del", HOST_IF, check=False)
        sh("ip", "route", "del", "10.255.0.2/32", check=False)

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
        self.stop_net()
        shutil.rmtree(self.dir, ignore_errors=True)
