"""A real dockerd for the docker driver's tests: Debian's docker.io with
runsc registered as a runtime, started here with its own data root, exec
root and socket, --iptables=false and no bridge (boxes run with
NetworkMode none), and stopped when the session ends. Nothing is pulled
from a registry: the only images are airlock's own, which the driver loads
from their trees. The data root is kept between sessions on this machine
(like the default image's cache), so an image is loaded into it once."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from conftest import need

DATA = Path(os.environ.get("AIRLOCK_TEST_DOCKER_DATA", "/var/cache/airlock-tests/docker"))
RUN = Path(os.environ.get("AIRLOCK_TEST_DOCKER_RUN", "/run/airlock-test-docker"))
SOCKET = RUN / "docker.sock"
PIDFILE = RUN / "dockerd.pid"
LOG = RUN / "dockerd.log"

DAEMON_JSON = {
    "iptables": False, "ip6tables": False, "bridge": "none", "storage-driver": "overlay2",
    # runsc on these machines: ptrace (no KVM needed) and no network of
    # its own (it cannot run with one in the root network namespace)
    "runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}},
}

_proc = None


def _ping():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(str(SOCKET))
        s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
        return b"OK" in s.recv(4096)
    except OSError:
        return False
    finally:
        s.close()


def _stop_stale():
    try:
        pid = int(PIDFILE.read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def start():
    """The socket of a running test dockerd (started once per session)."""
    global _proc
    if _proc is not None and _proc.poll() is None and _ping():
        return SOCKET
    need(shutil.which("dockerd") is not None, "dockerd is not installed (scripts/deps.sh installs docker.io)")
    need(Path("/usr/bin/runsc").exists(), "runsc is not installed (scripts/deps.sh installs it)")
    RUN.mkdir(parents=True, exist_ok=True)
    DATA.mkdir(parents=True, exist_ok=True)
    _stop_stale()
    (RUN / "daemon.json").write_text(json.dumps(DAEMON_JSON))
    log = open(LOG, "ab")
    _proc = subprocess.Popen(
        ["dockerd", "--config-file", str(RUN / "daemon.json"), "--data-root", str(DATA), "--exec-root",
         str(RUN / "exec"), "--pidfile", str(PIDFILE), "-H", f"unix://{SOCKET}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 60
    while not _ping():
        assert _proc.poll() is None, f"dockerd exited {_proc.returncode}: {LOG.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"dockerd did not answer in 60 s: {LOG.read_text()[-3000:]}"
        time.sleep(0.2)
    return SOCKET


def stop():
    global _proc
    if _proc is None:
        return
    _proc.terminate()
    try:
        _proc.wait(30)
    except subprocess.TimeoutExpired:
        _proc.kill()
        _proc.wait(10)
    _proc = None


def env():
    """The environment Docker's clients (and airlock) read the daemon from."""
    return dict(os.environ, DOCKER_HOST=f"unix://{SOCKET}")


def docker(*args, timeout=120, check=True):
    """The docker CLI on the test daemon."""
    p = subprocess.run(["docker", *map(str, args)], capture_output=True, timeout=timeout, env=env())
    if check:
        assert p.returncode == 0, f"docker {args}: {p.stderr.decode(errors='replace')}"
    return p


def airlock_containers():
    """Containers of airlock boxes on the test daemon, running or not."""
    out = docker("ps", "-aq", "--filter", "label=dev.airlock.box").stdout.decode().split()
    return out
