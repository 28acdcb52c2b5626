"""What the console's heavier reads take on a big workspace (SQLite):
GET /v1/threads with N runs in N/100 threads, GET /v1/usage with them, and GET /v1/sandboxes with
20 sandboxes of 8,000 files each (the walk's bound).

    /usr/bin/python3 bench/console_reads.py [BINARY] [RUNS]

The runs are copies of one real run, written into the store behind the
service's back; the files are written into the sandboxes' trees, as a
command in the box would leave them."""
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, "tests/integration")
from service_util import Service  # noqa: E402


def timed(client, path, n=5):
    ts = []
    for _ in range(n):
        t = time.monotonic()
        status, _, _ = client.request("GET", path)
        ts.append(time.monotonic() - t)
        assert status == 200, status
    return statistics.median(ts) * 1000


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/airlock"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    with tempfile.TemporaryDirectory() as tmp:
        svc = Service(tmp, binary=binary)
        svc.start()
        try:
            t = svc.new_tenant("big")
            c = svc.with_key(t.key)
            run = c.run("print(1)", thread_id="t0")
            db = sqlite3.connect(os.path.join(tmp, "airlock.db"), timeout=30)
            cols = [r[1] for r in db.execute("PRAGMA table_info(runs)") if r[1] != "seq"]
            sel = ", ".join("id || '-' || i" if k == "id" else "'t' || (i % ?)" if k == "thread_id" else k
                            for k in cols)
            db.execute(f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                       f"INSERT INTO runs ({', '.join(cols)}) SELECT {sel} FROM runs, n WHERE runs.id = ?",
                       (runs, max(runs // 100, 1), run["id"]))
            db.commit()
            db.close()
            print(f"GET /v1/threads, {runs} runs in {max(runs // 100, 1)} threads: "
                  f"{timed(c, '/v1/threads'):.1f} ms median", flush=True)
            print(f"GET /v1/usage (30 days by day), {runs} runs this month: "
                  f"{timed(c, '/v1/usage'):.1f} ms median", flush=True)
            status, _, _ = c.request("POST", "/sandboxes", json={"templateID": "base", "timeout": 600},
                                     headers={"X-API-KEY": c.key}, key=None)
            sids = []
            for _ in range(20):
                status, _, doc = c.request("POST", "/sandboxes", json={"templateID": "base", "timeout": 600},
                                           headers={"X-API-KEY": c.key}, key=None)
                if status != 201:
                    break
                sids.append(doc["sandboxID"])
            for sid in sids:
                home = os.path.join(tmp, "sandboxes", sid, "home")
                os.makedirs(home, exist_ok=True)
                for i in range(8000):
                    open(os.path.join(home, str(i)), "w").close()
            print(f"GET /v1/sandboxes, {len(sids)} sandboxes of 8,000 files: "
                  f"{timed(c, '/v1/sandboxes'):.1f} ms median", flush=True)
        finally:
            svc.stop()


if __name__ == "__main__":
    main()
