"""What open GET /v1/events streams cost the store: statements a second of an
idle `airlock serve` with N streams open, each in its own workspace (the
worst case for a look per stream), and N in one workspace.

    /usr/bin/python3 bench/activity_streams.py [BINARY] [N]

Prints one line per case: streams, workspaces, statements/s (the store's
counter on /metrics, over 10 s; the service's own statements, idle or
running runs one after another in the first workspace, are the 0-stream
lines)."""
import re
import socket
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, "tests/integration")
from service_util import Service  # noqa: E402


def statements(svc):
    text = urllib.request.urlopen(svc.base_url + "/metrics", timeout=10).read().decode()
    return int(re.search(r"^airlock_store_statements_total (\d+)", text, re.M).group(1))


def open_stream(svc, key):
    s = socket.create_connection((svc.host, svc.port))
    s.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
              f"Accept: text/event-stream\r\n\r\n".encode())
    head = s.recv(4096)
    assert b" 200 " in head.split(b"\r\n")[0], head
    return s


def rate(svc, secs=10.0):
    a = statements(svc)
    time.sleep(secs)
    return (statements(svc) - a - 1) / secs   # less the /metrics read's own


def busy_rate(svc, client, secs=10.0):
    """Statements a second while CLIENT runs trivial runs one after another
    (each run's own statements included; the 0-stream line is the base)."""
    import threading
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            client.run("print(1)")
    t = threading.Thread(target=loop)
    t.start()
    time.sleep(1)
    try:
        a = statements(svc)
        runs0 = svc.sql("SELECT COUNT(*) FROM runs")[0][0]
        time.sleep(secs)
        b = statements(svc)
        runs = svc.sql("SELECT COUNT(*) FROM runs")[0][0] - runs0
    finally:
        stop.set()
        t.join()
    return (b - a - 2) / secs, runs / secs


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/airlock"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with tempfile.TemporaryDirectory() as tmp:
        svc = Service(tmp, binary=binary)
        svc.start()
        try:
            keys = []
            for i in range(n):
                t = svc.new_tenant(f"bench{i}")
                keys.append(t.key)
                if i == 0:  # its runs are free: the busy phases run hundreds
                    svc.admin("price", "set", "--workspace", t.workspace, "0")
            time.sleep(2)
            print(f"{binary}: 0 streams: {rate(svc):.1f} statements/s", flush=True)
            busy = svc.with_key(keys[0])
            r, runs = busy_rate(svc, busy)
            print(f"{binary}: 0 streams, runs going ({runs:.1f}/s): {r:.1f} statements/s", flush=True)
            socks = [open_stream(svc, k) for k in keys]
            time.sleep(2)
            print(f"{binary}: {n} streams, {n} workspaces: {rate(svc):.1f} statements/s", flush=True)
            r, runs = busy_rate(svc, busy)
            print(f"{binary}: {n} streams, {n} workspaces, runs going ({runs:.1f}/s): {r:.1f} statements/s",
                  flush=True)
            for s in socks:
                s.close()
            time.sleep(3)
            socks = [open_stream(svc, keys[0]) for _ in range(min(n, 8))]
            time.sleep(2)
            print(f"{binary}: {len(socks)} streams, 1 workspace: {rate(svc):.1f} statements/s", flush=True)
            for s in socks:
                s.close()
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
