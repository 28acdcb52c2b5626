"""`airlock serve`: the per-person concurrency cap (default 3), the global cap,
the FIFO queue, canceling a queued run, and the bounded queue (429)."""
import time
import uuid

from service_util import LIVE, TERMINAL, assert_error, parse_time, service, services  # noqa: F401

SLEEP3 = "import time; time.sleep(3); print('slept')"


def states(client, ids):
    return [client.get_run(i)["state"] for i in ids]


def test_fourth_run_waits_while_three_run(service):
    me = service.new_tenant("sched-" + uuid.uuid4().hex[:6]).client
    t0 = time.monotonic()
    ids = [me.run(SLEEP3, wait=False)["id"] for _ in range(4)]
    # the first three reach running; the fourth stays queued while they sleep
    seen_three_running = False
    while time.monotonic() - t0 < 2.5:
        st = states(me, ids)
        assert st[3] == "queued", f"the 4th run is {st[3]} while three run: {st}"
        if st[:3] == ["running"] * 3:
            seen_three_running = True
        time.sleep(0.1)
    assert seen_three_running, f"the first three never ran together: {states(me, ids)}"
    # another person is not held up by this person's cap
    other = service.new_tenant("sched-o-" + uuid.uuid4().hex[:6]).client
    t1 = time.monotonic()
    r = other.run("print('other')")
    assert r["state"] == "succeeded" and time.monotonic() - t1 < 3.0
    done = [me.wait_state(i, TERMINAL, timeout=40) for i in ids]
    assert [d["state"] for d in done] == ["succeeded"] * 4, [d["state"] for d in done]
    assert all(d["result"]["stdout"] == "slept\n" for d in done)
    first_end = min(parse_time(d["finished_at"]) for d in done[:3])
    start4 = parse_time(done[3]["started_at"])
    assert start4.timestamp() >= first_end.timestamp() - 0.5, (done[3]["started_at"], first_end)
    assert time.monotonic() - t0 >= 5.5, "four 3 s runs under a cap of 3 finished too fast"


def test_cancel_while_queued(service):
    me = service.new_tenant("sched-c-" + uuid.uuid4().hex[:6]).client
    ids = [me.run("import time; time.sleep(30)", wait=False)["id"] for _ in range(4)]
    try:
        for i in ids[:3]:
            me.wait_state(i, "running", timeout=20)
        assert me.get_run(ids[3])["state"] == "queued"
        status, _, doc = me.cancel(ids[3])
        assert status == 202, (status, doc)
        assert doc["state"] == "canceled", f"a queued run is canceled at once: {doc['state']}"
        run = me.get_run(ids[3])
        assert run["state"] == "canceled" and run["result"] is None and run["started_at"] is None, run
        assert run["finished_at"] is not None
        ev = me.events(ids[3], timeout=10)
        assert ev[-1][1] == "result" and ev[-1][2]["state"] == "canceled"
        assert "running" not in [d["state"] for _, k, d in ev if k == "state"]
        assert_error(*me.cancel(ids[3])[::2], "conflict")
    finally:
        for i in ids[:3]:
            me.cancel(i)
    for i in ids[:3]:
        assert me.wait_state(i, TERMINAL, timeout=20)["state"] == "canceled"


def test_queue_full_is_429_with_retry_after(services):
    svc = services.start("qfull", {"max_concurrent": 1, "per_person_concurrency": 1, "queue_max": 2})
    ids = []
    try:
        for n in range(3):
            status, _, doc = svc.post_run("import time; time.sleep(30)")
            assert status == 201, (n, status, doc)
            ids.append(doc["id"])
            if n == 0:
                # the first holds the one slot before the queue fills: else
                # it is still queued, and the queue is full one run early
                svc.wait_state(ids[0], {"running"}, timeout=30)
        status, hdrs, doc = svc.post_run("print(1)")
        assert_error(status, doc, "queue_full")
        ra = hdrs.get("retry-after")
        assert ra is not None and ra.strip().isdigit() and int(ra) >= 1, f"Retry-After: {ra!r}"
        assert [svc.get_run(i)["state"] for i in ids][1:] == ["queued", "queued"]
    finally:
        for i in reversed(ids):
            svc.cancel(i)
    for i in ids:
        assert svc.wait_state(i, TERMINAL, timeout=20)["state"] == "canceled"
    # room again
    assert svc.run("print('again')")["state"] == "succeeded"


def test_person_at_cap_does_not_block_others(services):
    """max_concurrent = 3, per_person_concurrency = 2: A runs two and queues four;
    B's run, submitted after A's four, takes the free slot at once (A's queued
    runs are not a head-of-line block)."""
    svc = services.start("hol", {"max_concurrent": 3, "per_person_concurrency": 2, "queue_max": 64})
    a = svc.new_tenant("hol-a").client
    b = svc.new_tenant("hol-b").client
    a_ids = [a.run("import time; time.sleep(3)", wait=False)["id"] for _ in range(6)]
    time.sleep(0.3)
    t0 = time.monotonic()
    r = b.run("print('b')")
    assert r["state"] == "succeeded" and time.monotonic() - t0 < 2.0, "B waited behind A's queue"
    st = states(a, a_ids)
    assert st.count("queued") == 4, st
    for i in a_ids:
        a.cancel(i)
    for i in a_ids:
        a.wait_state(i, TERMINAL, timeout=20)


def test_backlog_does_not_starve_another_person(services):
    """max_concurrent = 2 (below the per-person cap): A fills both slots and
    queues four more; B's one run, queued after them, must get the next free
    slot rather than wait for A's whole backlog (issue 5: "a person's queued
    runs never starve another person's"; read here as fairness between people
    when the global cap binds)."""
    svc = services.start("fair", {"max_concurrent": 2, "queue_max": 64})
    a = svc.new_tenant("fair-a").client
    b = svc.new_tenant("fair-b").client
    code = "import time; time.sleep(2)"
    a_ids = [a.run(code, wait=False)["id"] for _ in range(6)]
    time.sleep(0.5)
    st = states(a, a_ids)
    assert st.count("running") + st.count("provisioning") == 2 and st.count("queued") == 4, st
    b_id = b.run(code, wait=False)["id"]
    assert b.get_run(b_id)["state"] == "queued"
    a_runs = [a.wait_state(i, TERMINAL, timeout=60) for i in a_ids]
    b_run = b.wait_state(b_id, TERMINAL, timeout=60)
    assert all(r["state"] == "succeeded" for r in a_runs + [b_run])
    b_start = parse_time(b_run["started_at"]).timestamp()
    a_starts = sorted(parse_time(r["started_at"]).timestamp() for r in a_runs)
    # at most two ran at once
    spans = [(parse_time(r["started_at"]).timestamp(), parse_time(r["finished_at"]).timestamp())
             for r in a_runs + [b_run]]
    for s, _ in spans:
        overlap = sum(1 for s2, f2 in spans if s2 <= s + 0.05 and f2 > s + 0.05)
        assert overlap <= 2, f"more than max_concurrent=2 runs at once: {spans}"
    assert b_start < a_starts[-1] - 0.5, (
        f"B's run started at {b_start:.2f}, after every one of A's queued runs ({a_starts}): starved")
