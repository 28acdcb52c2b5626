"""Many `airlock serve` nodes on one PostgreSQL database (docs/operations.md
"Many nodes"): three real daemons on a real cluster, sharing one state
directory (blobs, inputs, skills) as nodes on one shared volume would.

What must hold across nodes: a run is claimed by exactly one node; the
per-person cap holds over all of them together; a client of node A follows,
cancels, approves and downloads a run that node B executes; a node killed
with -9 is noticed within its lease, its running runs end as error
(refunded once), its queued runs are taken by the others, nothing is charged
twice; a node that comes back does not resurrect its runs; the audit chain
and the ledger stay exact; PostgreSQL restarted under load is survived."""
import concurrent.futures as cf
import http.client
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

import pg_util
from service_util import TERMINAL, Service, gov_tenant, put_settings, reap_boxes, wait_no_boxes

LEASE_S = 3


class Nodes:
    """N nodes on one fresh database and one state directory."""

    def __init__(self, n, config=None, lease_s=LEASE_S):
        self.cluster = pg_util.cluster()
        self.store = self.cluster.uri(self.cluster.new_database("nodes"))
        self.root = Path(tempfile.mkdtemp(prefix="airlock-nodes-"))
        self.state = self.root / "state"
        cfg = {"max_concurrent": 4, "node_lease_s": lease_s}
        cfg.update(config or {})
        self.nodes = []
        for i in range(n):
            svc = Service(self.state, config=cfg, store=self.store, bootstrap=(i == 0),
                          key=None if i == 0 else self.nodes[0].key)
            # each node its own log and config file beside the shared state
            svc.log_path = self.root / f"node{i}.log"
            self.nodes.append(svc)
        for svc in self.nodes:
            svc.start()

    def node_of(self, run_id):
        """The node (Service) whose daemon claimed RUN_ID, or None."""
        rows = self.nodes[0].sql("SELECT n.pid FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = ?", run_id)
        if not rows:
            return None
        pid = rows[0][0]
        return next((s for s in self.nodes if s.proc and s.proc.pid == pid), None)

    def others(self, svc):
        return [s for s in self.nodes if s is not svc and s.proc and s.proc.poll() is None]

    def close(self, failed):
        for svc in self.nodes:
            svc.stop()
        if failed:
            for svc in self.nodes:
                print(svc.log_tail(120))
        procs, cgs = wait_no_boxes(20)
        if procs or cgs:
            reap_boxes()
        assert not procs and not cgs, f"boxes left behind by the nodes: {procs} {cgs}"


@pytest.fixture
def nodes(request):
    made = []

    def make(n=3, **kw):
        ns = Nodes(n, **kw)
        made.append(ns)
        return ns

    failed_before = request.session.testsfailed
    yield make
    for ns in made:
        ns.close(request.session.testsfailed > failed_before)


def ledger_exact(svc, org):
    """The ledger sum equals the balance; each run charged at most once, refunded at most once,
    and refunded only if charged."""
    bal = svc.sql("SELECT credit_balance FROM orgs WHERE id = ?", org)[0][0]
    total = svc.sql("SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE org_id = ?", org)[0][0]
    assert int(total) == int(bal), f"ledger sum {total} != balance {bal}"
    per = svc.sql("SELECT run_id, kind, COUNT(*) FROM ledger WHERE org_id = ? AND run_id IS NOT NULL "
                  "GROUP BY run_id, kind", org)
    assert all(n == 1 for _, _, n in per), f"a run charged or refunded twice: {per}"
    charged = {r for r, k, _ in per if k == "charge"}
    refunded = {r for r, k, _ in per if k == "refund"}
    assert refunded <= charged, f"refunds of runs never charged: {refunded - charged}"
    return charged, refunded


def verify_audit(svc):
    p = svc.admin_run("audit", "verify")
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    assert p.returncode == 0, out
    return out


def test_a_run_is_claimed_once_and_the_cap_holds_across_nodes(nodes):
    ns = nodes(3)
    a, b, c = ns.nodes
    person = a.sql("SELECT id FROM people LIMIT 1")[0][0]
    # 12 runs of one person, four through each node: the person's cap is 3 in all
    runs = []
    for i in range(12):
        node = ns.nodes[i % 3]
        status, _, doc = node.post_run("import time; time.sleep(1.2); print('done')")
        assert status == 201, (status, doc)
        runs.append(doc["id"])
    peak, deadline = 0, time.monotonic() + 120
    while time.monotonic() < deadline:
        active = a.sql("SELECT COUNT(*) FROM runs WHERE person_id = ? AND state IN ('provisioning', 'running')",
                       person)[0][0]
        peak = max(peak, active)
        left = a.sql("SELECT COUNT(*) FROM runs WHERE person_id = ? AND state IN "
                     "('queued', 'provisioning', 'running')", person)[0][0]
        if left == 0:
            break
        time.sleep(0.05)
    assert left == 0, "the runs did not all end"
    assert peak <= 3, f"the per-person cap (3) was exceeded across nodes: {peak} at once"
    assert peak == 3, f"the nodes never used the person's 3 slots together (peak {peak})"
    done = [a.get_run(r) for r in runs]
    assert all(d["state"] == "succeeded" for d in done), [d["state"] for d in done]
    # each ran once: one 'running' event each, and the work spread over the nodes
    for r in runs:
        n = a.sql("SELECT COUNT(*) FROM run_events WHERE run_id = ? AND type = 'state' AND data LIKE ?",
                  r, '%"running"%')[0][0]
        assert n == 1, f"run {r} started {n} times"
    claimed_by = {row[0] for row in a.sql("SELECT node_id FROM runs WHERE id IN (%s)" % ",".join("?" * len(runs)),
                                          *runs)}
    assert len(claimed_by) >= 2, f"one node ran everything: {claimed_by}"


def _executing(ns, run_id, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = ns.node_of(run_id)
        if node and ns.nodes[0].sql("SELECT state FROM runs WHERE id = ?", run_id)[0][0] == "running":
            return node
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never ran on a node")


def test_follow_cancel_and_download_from_another_node(nodes):
    ns = nodes(3)
    a = ns.nodes[0]
    code = ("import time, sys\n"
            "open('/out/report.txt', 'w').write('from the box')\n"
            "for i in range(6):\n    print('tick', i, flush=True); time.sleep(0.4)\n")
    status, _, run = a.post_run(code)
    assert status == 201, run
    runner = _executing(ns, run["id"])
    other = ns.others(runner)[0]
    # follow it live from a node that does not run it: ticks arrive before the end
    seen, t_first, t_end = [], None, None
    for _, ev, data, at in other.stream(run["id"], timeout=60):
        if ev == "stdout":
            t_first = t_first or at
            seen.append(data["data"])
        if ev == "result":
            t_end = at
    out = "".join(seen)
    assert "tick 0" in out and "tick 5" in out, out
    assert t_first is not None and t_end is not None and t_end - t_first > 1.0, \
        "the follower on another node saw the output only at the end, not live"
    done = other.get_run(run["id"])
    assert done["state"] == "succeeded", done
    # its artifact, downloaded through the third node
    third = next(s for s in ns.nodes if s is not runner and s is not other)
    art = next(x for x in done["artifacts"] if x["path"] == "report.txt")
    assert third.content_bytes(art["id"])[1] == b"from the box"

    # a cancel asked of a node that does not run it stops the box
    status, _, run2 = a.post_run("import time; time.sleep(60)")
    assert status == 201, run2
    runner2 = _executing(ns, run2["id"])
    asker = ns.others(runner2)[0]
    t0 = time.monotonic()
    status, _, doc = asker.cancel(run2["id"])
    assert status in (200, 202), (status, doc)
    ended = asker.wait_state(run2["id"], TERMINAL, timeout=30)
    assert ended["state"] == "canceled", ended
    assert time.monotonic() - t0 < 15, "the cancel took longer than a box kill should"


def test_approved_on_one_node_runs_on_any(nodes):
    ns = nodes(2)
    a, b = ns.nodes
    t = gov_tenant(a, "appr")
    _, member = t.person_in("member")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always")
    status, _, run = member.post_run("print('approved across nodes')")
    assert status == 201 and run["state"] == "pending_approval", run
    approver_b = b.with_key(approver.key)
    status, _, doc = approver_b.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    assert status in (200, 202), (status, doc)
    done = member.wait_state(run["id"], TERMINAL, timeout=60)
    assert done["state"] == "succeeded" and "approved across nodes" in done["result"]["stdout"], done
    verify_audit(a)


def test_kill9_of_a_node_under_load(nodes):
    ns = nodes(3, config={"max_concurrent": 3})
    a = ns.nodes[0]
    t = gov_tenant(a, "load")
    people = [t.person_in("member") for _ in range(6)]
    org = t.org
    a.admin("credits", "grant", "--org", org, "100000")
    accepted, lock = [], threading.Lock()
    stop = threading.Event()

    def client(i):
        _, cl = people[i % len(people)]
        k = 0
        while not stop.is_set() and k < 6:
            k += 1
            for node in ns.nodes[i % 3:] + ns.nodes[:i % 3]:
                if node.proc.poll() is not None:
                    continue
                try:
                    status, _, doc = node.with_key(cl.key).post_run(
                        f"import time; time.sleep({0.3 + (i % 4) * 0.3}); print('run', {i}, {k})")
                except (OSError, http.client.HTTPException):
                    continue  # that node died under us: the next one takes it
                if status == 201:
                    with lock:
                        accepted.append(doc["id"])
                break

    with cf.ThreadPoolExecutor(16) as ex:
        futs = [ex.submit(client, i) for i in range(16)]
        # kill the node that runs most once the load is on
        deadline = time.monotonic() + 60
        victim = None
        while time.monotonic() < deadline and victim is None:
            rows = a.sql("SELECT n.pid, COUNT(*) FROM runs r JOIN nodes n ON n.id = r.node_id "
                         "WHERE r.state = 'running' GROUP BY n.pid ORDER BY COUNT(*) DESC")
            if rows and rows[0][1] >= 2:
                victim = next(s for s in ns.nodes if s.proc.pid == rows[0][0])
            time.sleep(0.05)
        assert victim is not None, "no node ever ran two runs at once"
        victim_node = a.sql("SELECT id FROM nodes WHERE pid = ? AND stopped_at IS NULL AND dead_at IS NULL",
                            victim.proc.pid)[0][0]
        running_there = {r for (r,) in a.sql("SELECT id FROM runs WHERE node_id = ? AND state = 'running'",
                                             victim_node)}
        victim.kill9()
        t_kill = time.monotonic()
        for f in futs:
            f.result(timeout=300)
    survivors = ns.others(victim)
    s0 = survivors[0]
    # noticed within the lease (and a renewal round): its running runs end as lost errors
    deadline = t_kill + LEASE_S * 3 + 10
    while time.monotonic() < deadline:
        dead = s0.sql("SELECT dead_at, dead_by FROM nodes WHERE id = ?", victim_node)[0]
        if dead[0]:
            break
        time.sleep(0.1)
    assert dead[0], f"node {victim_node} killed -9 was never declared dead"
    # every accepted run ends
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        left = s0.sql("SELECT COUNT(*) FROM runs WHERE state IN ('queued', 'provisioning', 'running')")[0][0]
        if left == 0:
            break
        time.sleep(0.2)
    assert left == 0, f"{left} runs never ended after the node died"
    states = dict(s0.sql("SELECT id, state FROM runs WHERE org_id = ?", org))
    assert set(accepted) <= set(states), "an accepted run is not in the store"
    lost = {r for r in running_there if states[r] == "error"}
    assert lost == running_there, f"runs of the dead node not ended as error: {running_there - lost}"
    codes = dict(s0.sql("SELECT id, error_code FROM runs WHERE org_id = ? AND state = 'error'", org))
    assert all(codes[r] == "lost" for r in lost), codes
    assert all(states[r] in ("succeeded", "error") for r in accepted), \
        {r: states[r] for r in accepted if states[r] not in ("succeeded", "error")}
    # nothing ran twice, the ledger is exact, the lost runs were refunded once
    twice = s0.sql("SELECT run_id, COUNT(*) FROM run_events WHERE type = 'state' AND data LIKE ? "
                   "GROUP BY run_id HAVING COUNT(*) > 1", '%"running"%')
    assert not twice, f"runs that started twice: {twice}"
    charged, refunded = ledger_exact(s0, org)
    assert lost <= refunded, f"lost runs not refunded: {lost - refunded}"
    verify_audit(s0)
    # the killed node's boxes die with their helpers (no box or cgroup left once they notice)
    procs, cgs = wait_no_boxes(30)
    assert not procs and not cgs, (procs, cgs)
    # and a node started again is a new node: the dead one stays dead
    victim.start()
    time.sleep(LEASE_S)
    assert s0.sql("SELECT dead_at FROM nodes WHERE id = ?", victim_node)[0][0], "the dead node came back to life"
    assert all(s0.sql("SELECT state FROM runs WHERE id = ?", r)[0][0] == "error" for r in lost)


def test_a_node_that_was_thought_dead_does_not_resurrect_its_runs(nodes):
    ns = nodes(2)
    a, b = ns.nodes
    status, _, run = a.post_run("import time; time.sleep(8); print('finished')")
    assert status == 201, run
    runner = _executing(ns, run["id"])
    other = ns.others(runner)[0]
    # the runner hangs (SIGSTOP) past its lease: the other declares it dead
    os.kill(runner.proc.pid, signal.SIGSTOP)
    try:
        ended = other.wait_state(run["id"], TERMINAL, timeout=LEASE_S * 4 + 10)
    finally:
        os.kill(runner.proc.pid, signal.SIGCONT)
    assert ended["state"] == "error" and ended["error"]["code"] == "lost", ended
    # woken, it learns it is dead: it kills its box and stops, and writes no result
    runner.proc.wait(timeout=30)
    assert runner.proc.returncode != 0, "a node declared dead went on as if nothing happened"
    log = runner.log_path.read_text(errors="replace")
    assert "node.fenced" in log, log[-2000:]
    time.sleep(1)
    again = other.get_run(run["id"])
    assert again["state"] == "error" and again["result"] is None, again
    org = other.sql("SELECT org_id FROM runs WHERE id = ?", run["id"])[0][0]
    charged, refunded = ledger_exact(other, org)
    assert run["id"] in refunded


def test_postgresql_restarted_under_load(nodes):
    ns = nodes(2, lease_s=15)
    a, b = ns.nodes
    ids = []
    for i in range(8):
        status, _, doc = ns.nodes[i % 2].post_run(f"import time; time.sleep(1.5); print({i})")
        assert status == 201, doc
        ids.append(doc["id"])
    time.sleep(1.0)
    ns.cluster.restart()
    # the nodes reconnect: every run ends (finished, or error and refunded), and new runs work
    deadline = time.monotonic() + 120
    states = {}
    while time.monotonic() < deadline:
        try:
            states = {r: a.get_run(r)["state"] for r in ids}
        except (OSError, http.client.HTTPException, AssertionError):
            time.sleep(0.5)
            continue
        if all(s in TERMINAL for s in states.values()):
            break
        time.sleep(0.3)
    assert all(s in TERMINAL for s in states.values()), states
    assert all(s in ("succeeded", "error") for s in states.values()), states
    for node in ns.nodes:
        done = node.run("print('after the restart')")
        assert done["state"] == "succeeded", done
    org = a.sql("SELECT org_id FROM runs WHERE id = ?", ids[0])[0][0]
    ledger_exact(a, org)
    verify_audit(a)


def test_a_stalled_lock_holder_does_not_take_healthy_nodes_down(nodes):
    """A transaction that holds the shared 'claim' lock and stalls (a node
    stopped or cut off inside a claim) must not make the healthy nodes miss
    their leases: each renews on a connection of its own, and waits for a
    lock are bounded (lock_timeout), so they declare no one dead."""
    ns = nodes(3)
    conn = ns.cluster.connect(ns.store.split("/")[3].split("?")[0])
    conn.autocommit = False
    cur = conn.cursor()
    cur.execute("SELECT pg_advisory_xact_lock(hashtextextended('claim', 0))")
    try:
        # the nodes go on answering, and a run waits rather than fails
        status, _, run = ns.nodes[1].post_run("print('after the stall')")
        assert status == 201, run
        time.sleep(LEASE_S * 3)
    finally:
        conn.rollback()
        conn.close()
    done = ns.nodes[2].wait_state(run["id"], TERMINAL, timeout=60)
    assert done["state"] == "succeeded", done
    time.sleep(LEASE_S)
    fenced = [s for s in ns.nodes if "node.fenced" in s.log_path.read_text(errors="replace")]
    assert not fenced, f"{len(fenced)} healthy nodes fenced after a {LEASE_S * 3}s lock wait"
    assert all(s.proc.poll() is None for s in ns.nodes)
    assert not ns.nodes[0].sql("SELECT id FROM nodes WHERE dead_at IS NOT NULL")


def test_an_mcp_session_lives_on_its_node_and_says_so_elsewhere(nodes):
    """MCP sessions are node-local (docs/operations.md): a client that reaches
    another node with its session is told so plainly (MCP's 404, which makes
    a client initialize again), and initializing there works."""
    from test_mcp import Mcp
    ns = nodes(2)
    a, b = ns.nodes
    m = Mcp(a)
    status, _, doc = m.post({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}})
    assert status == 200 and doc.get("result") == {}, doc
    m.svc = b  # the same client, the same session id, another node
    status, _, doc = m.post({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}})
    assert status == 404, (status, doc)
    assert "another airlock node" in json.dumps(doc), doc
    again = Mcp(b)
    status, _, doc = again.post({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {}})
    assert status == 200 and doc.get("result") == {}, doc
