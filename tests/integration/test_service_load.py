"""`airlock serve` under load: 1,000 trivial runs from 16 concurrent clients
with ?wait=true; nothing lost, nothing doubled (issue 5, Tests)."""
import collections
import concurrent.futures
import re
import time

import pytest

from service_util import TERMINAL, ServiceSet, parse_time

N_RUNS = 1000
CLIENTS = 16
CONFIG = {"max_concurrent": 4, "per_person_concurrency": 4, "queue_max": 256}


@pytest.fixture(scope="module")
def loaded(request):
    ss = ServiceSet(request)
    svc = ss.start("load", CONFIG)
    # every run is charged (2 credits): fund the 1,000 of them
    org = re.search(r"id=(org_\w+)", svc.admin("list")).group(1)
    svc.admin("credits", "grant", "--org", org, 2 * N_RUNS)
    yield svc
    ss.close()


def one(svc, i):
    code = f"open('/out/r.txt', 'w').write('{i}')\nprint({i})"
    for attempt in range(50):
        status, hdrs, doc = svc.post_run(code, wait=True)
        if status == 429:   # queue_full: the documented back-pressure, retry after Retry-After
            time.sleep(min(float(hdrs.get("retry-after", "1")), 2.0))
            continue
        return i, status, doc, attempt
    return i, 429, None, attempt


@pytest.mark.load
def test_thousand_runs_sixteen_clients(loaded):
    svc = loaded
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda i: one(svc, i), range(N_RUNS)))
    elapsed = time.monotonic() - t0
    bad = [(i, s, d) for i, s, d, _ in results if s != 200 or d["state"] != "succeeded"
           or d["result"]["stdout"] != f"{i}\n"]
    assert not bad, f"{len(bad)} runs went wrong, first: {bad[:3]}"
    retries = sum(a for *_, a in results)
    ids = [d["id"] for _, _, d, _ in results]
    assert len(set(ids)) == N_RUNS, "two requests answered with the same run"
    by_id = {d["id"]: (i, d) for i, _, d, _ in results}
    print(f"\n{N_RUNS} runs in {elapsed:.1f}s ({N_RUNS / elapsed:.1f}/s), {retries} 429 retries")

    # every run listed exactly once by GET /v1/runs pagination, newest first
    for limit in (200, 37):
        listed = svc.list_runs(limit=limit)
        counts = collections.Counter(r["id"] for r in listed)
        dup = [k for k, v in counts.items() if v > 1]
        assert not dup, f"limit={limit}: runs listed twice: {dup[:5]}"
        assert set(counts) == set(ids), (f"limit={limit}: missing {len(set(ids) - set(counts))}, "
                                         f"extra {len(set(counts) - set(ids))}")
        # newest first; runs created concurrently may be ordered by insertion rather
        # than by their created_at stamp, so allow inversions within half a second
        created = [parse_time(r["created_at"]).timestamp() for r in listed]
        worst = max((b - a for a, b in zip(created, created[1:])), default=0)
        assert worst <= 0.5, f"not newest first: a run created {worst:.3f}s later is listed after an older one"
    assert len(svc.list_runs(state="succeeded")) == N_RUNS
    assert svc.list_runs(state="failed") == []

    # every run reached a terminal state exactly once (its event stream), and every artifact is downloadable
    def check(rid):
        i, d = by_id[rid]
        ev = svc.events(rid, timeout=30)
        kinds = [k for _, k, _ in ev]
        terminal = [x["state"] for _, k, x in ev if k == "state" and x["state"] in TERMINAL]
        assert kinds.count("result") == 1 and kinds[-1] == "result", (rid, kinds)
        assert len(terminal) <= 1 and ev[-1][2]["state"] == "succeeded", (rid, ev)
        assert [n for n, _, _ in ev] == list(range(1, len(ev) + 1)), (rid, ev)
        assert "".join(x["data"] for _, k, x in ev if k == "stdout") == f"{i}\n"
        arts = d["artifacts"]
        assert len(arts) == 1 and arts[0]["path"] == "r.txt", (rid, arts)
        assert svc.content_bytes(arts[0]["id"])[1] == str(i).encode()
        return True

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        assert all(pool.map(check, ids))
