"""`airlock serve`: GET /v1/runs/{id}/events, Server-Sent Events (docs/api.md):
order, live delivery, late join and Last-Event-ID resume."""
import threading
import time

from service_util import LIVE, TERMINAL, assert_error, service  # noqa: F401

STATE_ORDER = ["queued", "provisioning", "running"]
CODE = ("import sys, time\n"
        "print('one', flush=True)\n"
        "print('err', file=sys.stderr, flush=True)\n"
        "time.sleep(1.5)\n"
        "print('two', flush=True)\n"
        "open('/out/a.txt', 'w').write('A')\n"
        "open('/out/b.json', 'w').write('{}')\n")


def check_stream(events, run_id=None):
    """The order docs/api.md promises; returns (states, stdout text, stderr text, artifacts, result)."""
    assert events, "empty stream"
    ids = [i for i, _, _ in events]
    assert ids == list(range(1, len(events) + 1)), f"ids not 1, 2, 3, ...: {ids}"
    kinds = [e for _, e, _ in events]
    assert set(kinds) <= {"state", "stdout", "stderr", "artifact", "result"}, kinds
    assert kinds[-1] == "result" and kinds.count("result") == 1, kinds
    first_output = next((n for n, k in enumerate(kinds) if k in ("stdout", "stderr")), len(kinds))
    last_output = max((n for n, k in enumerate(kinds) if k in ("stdout", "stderr")), default=-1)
    states = []
    for n, (_, kind, data) in enumerate(events):
        if kind == "state":
            st = data["state"]
            states.append(st)
            if st in LIVE:
                assert n < first_output, f"state {st} after output: {kinds}"
        if kind == "artifact":
            assert n > last_output, f"artifact before the last output chunk: {kinds}"
            assert data["id"].startswith("art_")
            if run_id:
                assert data["run_id"] == run_id
        if kind in ("stdout", "stderr"):
            assert isinstance(data["data"], str)
    live = [s for s in states if s in LIVE]
    assert live == sorted(live, key=STATE_ORDER.index) and len(set(live)) == len(live), f"state order {states}"
    assert "running" in states, states
    assert all(s in TERMINAL for s in states[len(live):]), f"a live state after a terminal one: {states}"
    assert len([s for s in states if s in TERMINAL]) <= 1, states
    result = events[-1][2]
    assert result["state"] in TERMINAL
    if run_id:
        assert result["id"] == run_id
    stdout = "".join(d["data"] for _, k, d in events if k == "stdout")
    stderr = "".join(d["data"] for _, k, d in events if k == "stderr")
    arts = [d for _, k, d in events if k == "artifact"]
    return states, stdout, stderr, arts, result


def test_stream_order_live_and_late_join(service):
    run = service.run(CODE, wait=False)
    received = []
    for ev_id, kind, data, t in service.stream(run["id"]):
        received.append((ev_id, kind, data, t))
    events = [(i, k, d) for i, k, d, _ in received]
    states, stdout, stderr, arts, result = check_stream(events, run["id"])
    assert stdout == "one\ntwo\n" and stderr == "err\n"
    assert result["state"] == "succeeded" and result["result"]["stdout"] == "one\ntwo\n"
    assert sorted(a["path"] for a in arts) == ["a.txt", "b.json"]
    assert sorted(a["id"] for a in arts) == sorted(a["id"] for a in result["artifacts"])
    # live: 'one' arrived well before the result (the script sleeps 1.5 s in between)
    t_one = next(t for _, k, d, t in received if k == "stdout" and "one" in d["data"])
    t_end = received[-1][3]
    assert t_end - t_one > 1.0, f"stdout was not streamed live ({t_end - t_one:.2f}s before the result)"
    # late join: the run has ended; a new client gets the full replay, identical
    late = service.events(run["id"])
    assert late == events
    # and again (replay is stable)
    assert service.events(run["id"]) == events


def test_last_event_id_resume_after_end(service):
    run = service.run(CODE)
    full = service.events(run["id"])
    check_stream(full, run["id"])
    n = len(full)
    for k in (0, 1, 2, n - 1):
        tail = service.events(run["id"], last_event_id=k)
        assert tail == full[k:], f"Last-Event-ID {k}: got ids {[i for i, _, _ in tail]}"
    assert service.events(run["id"], last_event_id=n) == []


def test_resume_in_the_middle_of_a_live_run(service):
    code = ("import time\n"
            "for i in range(6):\n"
            "    print('line', i, flush=True)\n"
            "    time.sleep(0.4)\n")
    run = service.run(code, wait=False)
    first = []
    gen = service.stream(run["id"])
    for ev_id, kind, data, _ in gen:
        first.append((ev_id, kind, data))
        if kind == "stdout":
            break
    gen.close()   # disconnect mid-run
    assert service.get_run(run["id"])["state"] in LIVE, "the run ended before the test could resume"
    rest = service.events(run["id"], last_event_id=first[-1][0])
    events = first + rest
    _, stdout, _, _, result = check_stream(events, run["id"])
    assert stdout == "".join(f"line {i}\n" for i in range(6))
    assert result["state"] == "succeeded"


def test_events_of_failed_and_canceled_runs_end_with_result(service):
    run = service.run("import sys; print('x'); sys.exit(4)")
    ev = service.events(run["id"])
    _, stdout, _, _, result = check_stream(ev, run["id"])
    assert stdout == "x\n" and result["state"] == "failed" and result["result"]["exit_code"] == 4

    run = service.run("import time; print('x', flush=True); time.sleep(60)", wait=False)
    box = {}

    def reader():
        box["events"] = service.events(run["id"], timeout=60)

    t = threading.Thread(target=reader)
    t.start()
    service.wait_state(run["id"], "running")
    time.sleep(0.3)
    status, _, _ = service.cancel(run["id"])
    assert status == 202
    t.join(30)
    assert not t.is_alive(), "the event stream did not end after the run was canceled"
    _, _, _, _, result = check_stream(box["events"], run["id"])
    assert result["state"] == "canceled"


def test_events_of_unknown_run_is_404(service):
    status, _, doc = service.get("/v1/runs/run_doesnotexist/events")
    assert_error(status, doc, "not_found")


def test_many_concurrent_listeners(service):
    run = service.run("import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.3)", wait=False)
    out = [None] * 8

    def reader(n):
        out[n] = service.events(run["id"])

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(o is not None for o in out)
    for o in out:
        assert o == out[0]
    check_stream(out[0], run["id"])
