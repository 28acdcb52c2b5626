"""Every end of a run does every step of an end (src/core/run_end.c): its
state and result events, the refund of airlock's own failure, the run.end
log line, its inputs removed, the skill bundles it held released, the
schedulers told. The paths used to be written four times over, and the end
of a run lost with its node (al_service_lose_run) skipped one step: the
release of the skill bundle a delete had left for it, which stayed on disk
until some other run happened to end on the node that noticed.

Two nodes on one PostgreSQL database and one state directory (as
test_nodes.py): a skill's run on one node, its skill deleted through the
other (the bundle is kept for the run), the runner's node killed -9; the
other node ends the run as lost, and its end removes the bundle."""
import json
import time

from test_nodes import LEASE_S, _executing, ledger_exact, nodes  # noqa: F401 (nodes is the fixture)
from test_skills import tarball, upload

NAP_SH = 'echo started; sleep "$(cat /work/args.json | tr -dc 0-9)"; echo slept\n'


def nap_bundle(name):
    m = {"name": name, "version": "1.0.0", "description": "Sleeps.", "image": "host",
         "entrypoints": [{"name": "nap", "language": "bash", "script": "nap.sh", "description": "Sleep S seconds.",
                          "input_schema": {"type": "object", "required": ["s"],
                                           "properties": {"s": {"type": "integer", "minimum": 0, "maximum": 30}}}}]}
    # the name makes the digest this test's own
    return tarball({"skill.json": json.dumps(m), "nap.sh": NAP_SH, "marker.txt": name})


def test_a_lost_run_releases_the_bundle_of_its_deleted_skill(nodes):
    ns = nodes(2)
    a = ns.nodes[0]
    name = f"lost-nap-{time.monotonic_ns() % 10**9}"
    digest = upload(a, nap_bundle(name))["digest"]
    a.ok("POST", f"/v1/skills/{name}/promote")
    bundle = ns.state / "skills" / ("sha256-" + digest[7:])
    status, _, run = a.request("POST", f"/v1/skills/{name}/run", json={"entrypoint": "nap", "args": {"s": 30}})
    assert status == 201, run
    runner = _executing(ns, run["id"])
    other = ns.others(runner)[0]
    # deleted through the node that will see the run lost: kept for the run
    doc = other.ok("DELETE", f"/v1/skills/{name}")
    assert doc["live_runs"] == [run["id"]] and doc["deleted"][0]["bundle"] == "kept_for_runs", doc
    assert bundle.is_dir(), "the bundle of a running run was removed"
    runner.kill9()
    ended = other.wait_state(run["id"], {"succeeded", "failed", "error", "killed", "timed_out", "canceled"},
                             timeout=LEASE_S * 4 + 20)
    assert ended["state"] == "error" and ended["error"]["code"] == "lost", ended
    # the lost run's end released its bundle, as every other end does
    deadline = time.monotonic() + 10
    while bundle.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not bundle.exists(), "the bundle of a deleted skill outlived its last run, which was lost"
    # and the rest of a lost run's end: refunded, its inputs gone, said in the log
    org = other.sql("SELECT org_id FROM runs WHERE id = ?", run["id"])[0][0]
    _, refunded = ledger_exact(other, org)
    assert run["id"] in refunded
    assert not (ns.state / "runs" / run["id"]).exists(), "the lost run's inputs were left on disk"
    log = other.log_path.read_text(errors="replace")
    ends = [json.loads(line[line.index("{"):]) for line in log.splitlines()
            if '"run.end"' in line and run["id"] in line]
    assert len(ends) == 1 and ends[0]["error"] == "lost" and ends[0]["state"] == "error", ends
