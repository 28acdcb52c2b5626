"""Governance (docs/api.md): credits.  The grant of a new organisation, a
charge per provisioned run at the workspace's price, refunds of runs that end
in `error`, 402 payment_required, `airlock admin credits grant/show`,
GET /v1/usage, and the ledger invariant under 16 concurrent clients with
provisioning failures injected (a workspace switched to the disabled driver
mid-burst; kill -9 of the service mid-burst, then a restart):

    sum(charges) - sum(refunds) == sum over runs of price(run's workspace)
        for the runs that were provisioned (started_at set) and did not end in `error`

with at most one charge per run.  A run that was denied, or canceled while
queued, is never charged."""
import http.client
import json
import random
import re
import threading
import time
import pytest

from service_util import (GOV_TERMINAL, LEDGER_FIELDS, TERMINAL, assert_error, assert_no_boxes, audit_events, balance,
                          gov_tenant, ledger_by_run, new_role_person, parse_time, put_settings, service,  # noqa: F401
                          set_price,
                          services, usage)  # noqa: F401


def ledger_entries(clients, **q):
    """The union (by id) of the ledger as each client sees it."""
    out = {}
    for c in clients:
        doc = usage(c, limit=1000, **q)
        for e in doc["ledger"]:
            missing = LEDGER_FIELDS - set(e)
            assert not missing, f"ledger entry lacks {missing}: {e}"
            assert e["kind"] in ("grant", "charge", "refund"), e
            out[e["id"]] = e
    return list(out.values())


def check_ledger(runs, prices, entries, bal, granted):
    """The invariant; RUNS from the run records, PRICES {workspace key: price}, runs as (ws key, run)."""
    by_run = ledger_by_run(entries)
    want_total, problems = 0, []
    for wsk, r in runs:
        assert r["state"] in GOV_TERMINAL, f"run not ended: {r}"
        provisioned = r["started_at"] is not None
        if r["state"] in ("succeeded", "failed", "timed_out", "killed"):
            assert provisioned, f"a run that ran has no started_at: {r}"
        if r["state"] == "denied":
            assert not provisioned, r
        want = prices[wsk] if provisioned and r["state"] != "error" else 0
        want_total += want
        led = by_run.pop(r["id"], {"charge": [], "refund": []})
        if len(led["charge"]) > 1:
            problems.append(f"{r['id']} ({r['state']}) charged {len(led['charge'])} times: {led}")
        if len(led["refund"]) > len(led["charge"]):
            problems.append(f"{r['id']} ({r['state']}) refunded more than charged: {led}")
        net = sum(led["charge"]) - sum(led["refund"])
        if net != want:
            problems.append(f"{r['id']} state={r['state']} started_at={r['started_at']} "
                            f"error={r.get('error')}: net {net}, want {want} ({led})")
    assert not by_run, f"ledger entries for runs that do not exist: {by_run}"
    assert not problems, "ledger invariant broken:\n" + "\n".join(problems)
    charges = sum(abs(e["amount"]) for e in entries if e["kind"] == "charge")
    refunds = sum(abs(e["amount"]) for e in entries if e["kind"] == "refund")
    grants = sum(e["amount"] for e in entries if e["kind"] == "grant")      # signed: a grant may take back
    assert charges - refunds == want_total, (charges, refunds, want_total)
    assert grants == granted, f"grants {grants}, want {granted}"
    assert bal == granted - charges + refunds, f"balance {bal} != grants {granted} - charges {charges} + refunds {refunds}"
    for e in entries:
        parse_time(e["created_at"])
        assert isinstance(e["balance_after"], (int, float)), e
    return want_total


def check_audit(svc, client, runs):
    """Every run has one capability.invoke_allowed; every run that was provisioned one tool.call
    (after a crash too); and `airlock admin audit verify` passes."""
    evs = audit_events(client)
    allowed, calls = {}, {}
    for e in evs:
        if e["kind"] == "capability.invoke_allowed":
            allowed[e["run_id"]] = allowed.get(e["run_id"], 0) + 1
        elif e["kind"] == "tool.call":
            calls[e["run_id"]] = calls.get(e["run_id"], 0) + 1
    bad = []
    for _, r in runs:
        if allowed.get(r["id"]) != 1:
            bad.append(f"{r['id']} ({r['state']}): {allowed.get(r['id'], 0)} invoke_allowed")
        if calls.get(r["id"], 0) > 1 or (r["started_at"] and calls.get(r["id"], 0) != 1):
            bad.append(f"{r['id']} ({r['state']}, started_at={r['started_at']}): {calls.get(r['id'], 0)} tool.call")
    assert not bad, f"{len(bad)} runs with a wrong audit record:\n" + "\n".join(bad[:10])
    proc = svc.admin_run("audit", "verify", timeout=120)
    assert proc.returncode == 0, f"audit verify: {proc.stdout!r} {proc.stderr!r}"


def test_new_org_grant_and_charge(service):
    t = gov_tenant(service, "cr")
    doc = usage(t.client)
    assert doc["balance"] == 1000, doc
    grants = [e for e in doc["ledger"] if e["kind"] == "grant"]
    assert len(grants) == 1 and abs(grants[0]["amount"]) == 1000 and grants[0]["run_id"] is None, doc["ledger"]
    assert grants[0]["balance_after"] == 1000
    run = t.client.run("print('paid')")
    assert run["state"] == "succeeded"
    doc = usage(t.client)
    assert doc["balance"] == 998, doc
    ch = [e for e in doc["ledger"] if e["kind"] == "charge"]
    assert len(ch) == 1 and ch[0]["run_id"] == run["id"] and abs(ch[0]["amount"]) == 2, doc["ledger"]
    assert ch[0]["balance_after"] == 998, ch
    # a failing script is charged (it ran); a timeout too
    r = t.client.run("import sys; sys.exit(3)")
    assert r["state"] == "failed"
    r2 = t.client.run("import time; time.sleep(30)", limits={"timeout_s": 1})
    assert r2["state"] == "timed_out", r2
    doc = usage(t.client)
    assert doc["balance"] == 994, doc
    by = ledger_by_run(doc["ledger"])
    assert by[r["id"]] == {"charge": [2], "refund": []} and by[r2["id"]] == {"charge": [2], "refund": []}, by
    # runs by state and language
    assert doc["runs"]["by_state"].get("succeeded") == 1 and doc["runs"]["by_state"].get("failed") == 1, doc["runs"]
    assert doc["runs"]["by_state"].get("timed_out") == 1, doc["runs"]
    assert doc["runs"]["by_language"].get("python") == 3, doc["runs"]


def test_usage_period_and_limit(service):
    t = gov_tenant(service, "per")
    for _ in range(2):
        t.client.run("print(1)")
    doc = usage(t.client, limit=1)
    assert len(doc["ledger"]) == 1, doc["ledger"]
    future = "2999-01-01T00:00:00Z"
    doc = usage(t.client, **{"from": future})
    assert doc["ledger"] == [] and sum(doc["runs"]["by_state"].values()) == 0, doc
    assert doc["balance"] == 996, "the balance is not a period's"
    doc = usage(t.client, **{"from": "2000-01-01T00:00:00Z", "to": future})
    assert len(doc["ledger"]) == 3 and doc["runs"]["by_state"].get("succeeded") == 2, doc
    status, _, err = t.client.request("GET", "/v1/usage", key=None)
    assert_error(status, err, "unauthorized")
    status, _, err = t.client.request("GET", "/v1/usage", query={"limit": "0"})
    assert_error(status, err, "bad_request")
    # a period that cannot be read must not silently answer an empty ledger
    status, _, err = t.client.request("GET", "/v1/usage", query={"from": "yesterday"})
    assert_error(status, err, "bad_request")


def test_price_per_workspace(service):
    t = gov_tenant(service, "price")
    set_price(service, t.workspace, 7)
    r = t.client.run("print(7)")
    assert ledger_by_run(usage(t.client)["ledger"])[r["id"]] == {"charge": [7], "refund": []}
    set_price(service, t.workspace, 0)
    r0 = t.client.run("print(0)")
    assert r0["state"] == "succeeded"
    assert balance(t.client) == 993


def test_402_and_admin_credits(service):
    t = gov_tenant(service, "pay")
    _, member = t.person_in("member")
    set_price(service, t.workspace, 500)
    assert member.run("print(1)")["state"] == "succeeded"
    assert member.run("print(2)")["state"] == "succeeded"     # balance == price: still paid for
    assert balance(member) == 0
    n_runs = len(member.list_runs())
    for wait in (False, True):
        status, _, doc = member.post_run("print('cannot pay')", wait=wait)
        assert_error(status, doc, "payment_required", 402)
        assert re.search(r"credit|balance", doc["error"]["message"], re.I), doc
    assert len(member.list_runs()) == n_runs, "a refused (402) run left a record"
    # show and grant from the CLI
    out = service.admin("credits", "show", "--org", t.org)
    assert re.search(r"\b0\b", out), f"credits show: {out!r}"
    service.admin("credits", "grant", "--org", t.org, 300)
    assert balance(member) == 300
    out = service.admin("credits", "show", "--org", t.org)
    assert "300" in out, f"credits show after a grant: {out!r}"
    status, _, doc = member.post_run("print('still short')")        # 300 < 500
    assert_error(status, doc, "payment_required", 402)
    service.admin("credits", "grant", "--org", t.org, 200)
    r = member.run("print('paid again')")
    assert r["state"] == "succeeded" and balance(member) == 0
    grants = [e for e in usage(member)["ledger"] if e["kind"] == "grant"]
    assert sorted(abs(g["amount"]) for g in grants) == [200, 300, 1000], grants
    service.admin("credits", "grant", "--org", t.org, "lots", check=False)
    assert balance(member) == 0


def test_cli_credits_errors(service, tmp_path):
    for args in (("credits", "grant", "--org", "org_doesnotexist", "5"),
                 ("credits", "grant", "--org"),
                 ("credits", "show", "--org", "org_doesnotexist")):
        proc = service.admin_run(*args, timeout=30)
        assert proc.returncode != 0, f"airlock admin {args} succeeded: {proc.stdout!r}"


def test_queued_cancel_not_charged(service):
    t = gov_tenant(service, "cq")
    put_settings(t.client, concurrency=1)
    bal = balance(t.client)
    busy = t.client.run("import time; print('up', flush=True); time.sleep(30)", wait=False)
    t.client.wait_state(busy["id"], "running", timeout=30)
    q = t.client.run("print('queued')", wait=False)
    assert t.client.get_run(q["id"])["state"] == "queued"
    status, _, doc = t.client.cancel(q["id"])
    assert status == 202 and doc["state"] == "canceled", doc
    status, _, doc = t.client.cancel(busy["id"])
    assert status == 202
    done = t.client.wait_state(busy["id"], TERMINAL, timeout=30)
    assert done["state"] == "canceled"
    by = ledger_by_run(usage(t.client)["ledger"])
    assert q["id"] not in by, f"a run canceled while queued was charged: {by}"
    assert by.get(busy["id"]) == {"charge": [2], "refund": []}, "a run canceled while running is charged once"
    assert balance(t.client) == bal - 2


# ------------------------------------------------------------ under load


CODES = [
    ("print('ok')", None),
    ("import sys; print('bad'); sys.exit(4)", None),
    ("import time; time.sleep(0.3); print('slept')", None),
    ("import time; time.sleep(10)", {"timeout_s": 1}),
]


def _client_loop(client, wsk, n, rng, record, stop=None, pause=0.0):
    for i in range(n):
        if stop is not None and stop.is_set():
            return
        if pause:
            time.sleep(rng.uniform(0, pause))
        code, limits = rng.choice(CODES)
        fields = {"limits": limits} if limits else {}
        wait = rng.random() < 0.5
        try:
            status, _, doc = client.post_run(code, wait=wait, description=f"burst {wsk} {i}", **fields)
        except (OSError, http.client.HTTPException) as e:
            record.append((wsk, "exc", repr(e), time.monotonic()))
            time.sleep(0.2)
            continue
        record.append((wsk, status, doc, time.monotonic()))
        if status == 201 and rng.random() < 0.15:
            try:
                client.cancel(doc["id"])
            except (OSError, http.client.HTTPException):
                pass


def _collect(clients_by_ws, timeout=180):
    """(ws key, run) for every run of each workspace, once every run has ended."""
    deadline = time.monotonic() + timeout
    while True:
        runs = []
        for wsk, c in clients_by_ws.items():
            runs += [(wsk, r) for r in c.list_runs()]
        live = [r for _, r in runs if r["state"] not in GOV_TERMINAL]
        if not live:
            return runs
        assert time.monotonic() < deadline, f"runs never ended: {live[:5]}"
        time.sleep(0.5)


def test_ledger_invariant_burst_with_disabled_driver(services):
    svc = services.start("burst", {"max_concurrent": 6, "per_person_concurrency": 3})
    t = gov_tenant(svc, "burst")
    ws2 = t.add_workspace("burst-ws2")
    _, admin2 = new_role_person(svc, ws2, "admin2", "admin")
    set_price(svc, t.workspace, 3)
    set_price(svc, ws2, 5)
    prices = {"ws1": 3, "ws2": 5}
    clients = []
    for i in range(16):
        wsk = "ws1" if i % 2 == 0 else "ws2"
        _, c = new_role_person(svc, t.workspace if wsk == "ws1" else ws2, f"client{i}", "member")
        clients.append((wsk, c))
    record = []
    lock = threading.Lock()

    def loop(idx, wsk, c):
        mine = []
        _client_loop(c, wsk, 5, random.Random(idx), mine)
        with lock:
            record.extend(mine)

    threads = [threading.Thread(target=loop, args=(i, w, c), daemon=True) for i, (w, c) in enumerate(clients)]
    for th in threads:
        th.start()
    time.sleep(2.0)
    put_settings(admin2, driver="disabled")          # injected failure: ws2's provisioning is switched off
    disabled_at = time.monotonic()
    time.sleep(3.0)
    # back on: the service's own driver (native, or docker in the docker pass)
    put_settings(admin2, driver=admin2.get("/v1/settings")[2]["service"]["driver"])
    for th in threads:
        th.join(300)
    assert not any(th.is_alive() for th in threads), "clients never finished"
    statuses = {}
    for wsk, status, doc, _ in record:
        statuses.setdefault((wsk, status), 0)
        statuses[(wsk, status)] += 1
        if status == 503:
            assert_error(status, doc, "driver_disabled")
            assert wsk == "ws2", "a ws1 client got 503 while only ws2 was disabled"
        elif status == "exc":
            raise AssertionError(f"a request failed while the service ran: {doc}")
        else:
            assert status in (200, 201), (status, doc)
    assert statuses.get(("ws2", 503)), f"no request saw the disabled driver: {statuses}"
    runs = _collect({"ws1": t.client, "ws2": admin2})
    accepted = {w: sum(n for (ww, s), n in statuses.items() if ww == w and s in (200, 201)) for w in ("ws1", "ws2")}
    got = {w: sum(1 for ww, _ in runs if ww == w) for w in ("ws1", "ws2")}
    assert got == accepted, f"run records {got} != accepted requests {accepted} (a 503 left a record?)"
    entries = ledger_entries([t.client, admin2])
    bal = balance(t.client)
    assert balance(admin2) == bal, "two workspaces of one organisation see different balances"
    total = check_ledger(runs, prices, entries, bal, 1000)
    assert total > 0
    check_audit(svc, t.client, [x for x in runs if x[0] == "ws1"])
    check_audit(svc, admin2, [x for x in runs if x[0] == "ws2"])
    states = sorted({r["state"] for _, r in runs})
    assert {"succeeded", "failed", "timed_out"} <= set(states), states
    del disabled_at


def test_ledger_invariant_kill9_mid_burst(services):
    svc = services.start("crash", {"max_concurrent": 4, "per_person_concurrency": 2})
    t = gov_tenant(svc, "crash")
    set_price(svc, t.workspace, 3)
    clients = [new_role_person(svc, t.workspace, f"c{i}", "member")[1] for i in range(16)]
    # one run that is surely running (provisioned, charged) when the service dies: it must be refunded
    sleeper = t.client.run("import time; print('up', flush=True); time.sleep(120)", wait=False)
    t.client.wait_state(sleeper["id"], "running", timeout=30)
    record, lock, stop = [], threading.Lock(), threading.Event()

    def loop(idx, c):
        mine = []
        _client_loop(c, "ws", 40, random.Random(100 + idx), mine, stop, pause=0.4)
        with lock:
            record.extend(mine)

    threads = [threading.Thread(target=loop, args=(i, c), daemon=True) for i, c in enumerate(clients)]
    for th in threads:
        th.start()
    time.sleep(2.0)
    live_at_kill = [r["id"] for r in t.client.list_runs() if r["state"] in ("queued", "provisioning", "running")]
    killed_at = time.monotonic()
    svc.kill9()
    time.sleep(0.5)
    svc.start()
    restarted_at = time.monotonic()
    time.sleep(2.0)
    stop.set()
    for th in threads:
        th.join(300)
    assert not any(th.is_alive() for th in threads), "clients never finished"
    before = sum(1 for _, st, _, at in record if st in (200, 201) and at < killed_at)
    after = sum(1 for _, st, _, at in record if st in (200, 201) and at > restarted_at)
    assert before and after, f"the kill was not in the middle of the burst: {before} runs before, {after} after"
    assert len(live_at_kill) >= 2, f"only {live_at_kill} live when the service was killed"
    runs = _collect({"ws": t.client})
    s = t.client.get_run(sleeper["id"])
    assert s["state"] == "error", f"a run lost by a killed service is {s['state']}"
    entries = ledger_entries([t.client])
    by = ledger_by_run(entries)
    assert by.get(sleeper["id"]) == {"charge": [3], "refund": [3]}, f"the lost run's ledger: {by.get(sleeper['id'])}"
    check_ledger(runs, {"ws": 3}, entries, balance(t.client), 1000)
    check_audit(svc, t.client, runs)
    states = {}
    for _, r in runs:
        states[r["state"]] = states.get(r["state"], 0) + 1
    assert states.get("succeeded") and states.get("error"), states
    # the service keeps charging exactly once after the restart
    r = t.client.run("print('after')")
    assert ledger_by_run(ledger_entries([t.client]))[r["id"]] == {"charge": [3], "refund": []}
    assert_no_boxes(20, "after the crash burst")
    # a second kill -9 while idle changes nothing
    before = (balance(t.client), len(ledger_entries([t.client])))
    svc.kill9()
    svc.start()
    assert (balance(t.client), len(ledger_entries([t.client]))) == before


def test_usage_is_per_org(service):
    a, b = gov_tenant(service, "ua"), gov_tenant(service, "ub")
    ra = a.client.run("print('a')")
    rb = b.client.run("print('b')")
    la, lb = usage(a.client)["ledger"], usage(b.client)["ledger"]
    assert rb["id"] not in json.dumps(la) and ra["id"] not in json.dumps(lb)
    assert balance(a.client) == balance(b.client) == 998
    service.admin("credits", "grant", "--org", a.org, 5)
    assert balance(a.client) == 1003 and balance(b.client) == 998


def test_no_overdraft_under_concurrency(service):
    """16 clients at once against a balance that pays for exactly 3 runs: exactly 3 are
    charged, the rest are refused (402 up front, or ended uncharged), the balance ends at 0."""
    t = gov_tenant(service, "od")
    service.admin("credits", "grant", "--org", t.org, -700)      # 1000 - 700 = 300
    assert balance(t.client) == 300
    set_price(service, t.workspace, 100)
    clients = [t.person_in("member")[1] for _ in range(16)]
    answers, lock = [], threading.Lock()
    barrier = threading.Barrier(16)

    def go(c):
        barrier.wait(10)
        r = c.post_run("import time; time.sleep(0.3); print('paid')", wait=True)
        with lock:
            answers.append(r)

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    ran = [d for s, _, d in answers if s == 200 and d["state"] == "succeeded"]
    refused = [d for s, _, d in answers if s == 402]
    other = [(s, d) for s, _, d in answers if not (s == 200 and d["state"] == "succeeded") and s != 402]
    for s, d in other:
        assert s == 200 and d["state"] == "error" and d["result"] is None, f"unexpected answer {s}: {d}"
        assert "payment" in json.dumps(d["error"]) or "credit" in json.dumps(d["error"]), d
    assert len(ran) == 3, f"{len(ran)} runs ran on a balance that pays for 3 ({len(refused)} refused, {len(other)} other)"
    assert balance(t.client) == 0
    runs = [("ws", r) for r in t.client.list_runs()]
    check_ledger(runs, {"ws": 100}, ledger_entries([t.client]), 0, 300)


def test_queued_runs_beyond_the_balance(service):
    """Runs accepted while the balance covered them, then queued, and then credits taken back:
    the one that can no longer be paid for when its turn comes does not run and is not charged;
    the balance stays >= 0. (A run the balance could not cover beside the runs already waiting
    is refused 402 at creation: test_battery_n_tenant.py.)"""
    t = gov_tenant(service, "qb")
    set_price(service, t.workspace, 200)
    put_settings(t.client, concurrency=1)
    first = t.client.run("import time; print('up', flush=True); time.sleep(5)", wait=False)
    t.client.wait_state(first["id"], "running", timeout=30)
    assert balance(t.client) == 800
    b = t.client.run("print('b')", wait=False)          # 800 >= 200: accepted
    c = t.client.run("print('c')", wait=False)          # 800 - 200 held by b >= 200: accepted
    service.admin("credits", "grant", "--org", t.org, -600)   # now only one of b, c can be paid
    done = [t.client.wait_state(x["id"], GOV_TERMINAL, timeout=60) for x in (first, b, c)]
    assert done[0]["state"] == "succeeded" and done[1]["state"] == "succeeded", done
    assert done[2]["state"] != "succeeded" and done[2]["result"] is None, f"an unpaid run ran: {done[2]}"
    assert done[2]["error"] and re.search(r"payment|credit", json.dumps(done[2]["error"])), done[2]
    assert balance(t.client) == 0
    by = ledger_by_run(usage(t.client)["ledger"])
    assert c["id"] not in by or by[c["id"]]["charge"] == by[c["id"]]["refund"], by
