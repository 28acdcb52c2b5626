"""A workspace skill's end of life (docs/api.md "Skills"): DELETE
/v1/skills/{name} and DELETE /v1/skills/{name}/versions/{version}, and the
collection of stored bundles under STATE/skills/ that nothing refers to.

Bundles are stored by digest and shared: the same bundle uploaded by two
workspaces is one directory, which one workspace's delete must not remove.
A run that is queued, waiting for approval or running when its skill is
deleted still runs (its bundle is kept until it ends), and the state
directory holds no orphan afterwards, nor after a restart."""
import json
import os
import time

import pytest

from conftest import ROOT
from service_util import Service, ServiceSet, assert_error, audit_events, gov_tenant, new_role_person, put_settings
from test_skills import BUNDLED, _workspace, hello_bundle, skill_run, tarball, upload


@pytest.fixture(scope="module")
def svc(request):
    ss = ServiceSet(request)
    s = Service(ss.root / "skills-life", config={"skills_dir": str(ROOT / "skills"), "max_concurrent": 4})
    ss.services.append(s)
    s.start()
    yield s
    ss.close()


def unique(prefix):
    return f"{prefix}-{time.monotonic_ns() % 10**9}"


def bundle_dir(svc, digest):
    assert digest.startswith("sha256:") and len(digest) == 71, digest
    return svc.state / "skills" / ("sha256-" + digest[7:])


def wait_gone(path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not path.exists()


def stored(svc):
    return {p.name for p in (svc.state / "skills").iterdir()}


def referenced(svc):
    """What may be stored: the digests of every workspace's versions (from the
    database itself), of the bundled skills, and of the runs that have not ended."""
    rows = {r[0] for r in svc.sql("SELECT digest FROM skills")}
    # inputs is JSON text: its skill.digest is read here, the same on either backend
    live = set()
    for (inputs,) in svc.sql("SELECT inputs FROM runs WHERE state NOT IN "
                             "('succeeded', 'failed', 'timed_out', 'killed', 'canceled', 'error', 'denied')"):
        skill = (json.loads(inputs) or {}).get("skill") if inputs.lstrip().startswith("{") else None
        if isinstance(skill, dict) and skill.get("digest") is not None:
            live.add(skill["digest"])
    bundled = {s["digest"] for s in svc.ok("GET", "/v1/skills")["skills"] if s["source"] == "bundled"}
    return {"sha256-" + d[7:] for d in rows | live | bundled}


def assert_no_orphans(svc):
    have, want = stored(svc), referenced(svc)
    assert have == want, f"stored but referenced by nothing: {sorted(have - want)}; referenced but missing: " \
                         f"{sorted(want - have)}"


SLOW_SH = 'echo started; sleep "$(cat /work/args.json | tr -dc 0-9)"; echo "slept, skill files:"; ls /skill\n'


def slow_bundle(name, marker):
    """A skill whose entrypoint sleeps {"s": N} seconds; MARKER makes its digest its own."""
    m = {"name": name, "version": "1.0.0", "description": "Sleeps.", "image": "host",
         "entrypoints": [{"name": "nap", "language": "bash", "script": "nap.sh", "description": "Sleep S seconds.",
                          "input_schema": {"type": "object", "required": ["s"],
                                           "properties": {"s": {"type": "integer", "minimum": 0, "maximum": 30}}}}]}
    return tarball({"skill.json": json.dumps(m), "nap.sh": SLOW_SH, "marker.txt": marker})


# ---------------------------------------------------------------- deletes


def test_delete_removes_every_version_and_frees_the_bundles(svc):
    name = unique("gone")
    v1 = upload(svc, hello_bundle(name=name))
    v2 = upload(svc, hello_bundle(name=name, version="2.0.0", script="print('v2')\n"))
    svc.ok("POST", f"/v1/skills/{name}/promote")
    d1, d2 = bundle_dir(svc, v1["digest"]), bundle_dir(svc, v2["digest"])
    assert d1.is_dir() and d2.is_dir() and (d1 / "skill.json").is_file()
    doc = svc.ok("DELETE", f"/v1/skills/{name}")
    assert doc["name"] == name and doc["live_runs"] == [], doc
    assert sorted((d["version"], d["digest"], d["bundle"]) for d in doc["deleted"]) == [
        ("1.0.0", v1["digest"], "released"), ("2.0.0", v2["digest"], "released")], doc
    assert {d["version"]: d["state"] for d in doc["deleted"]} == {"1.0.0": "uploaded", "2.0.0": "promoted"}, doc
    # the files are gone from the disk, the skill from every listing
    assert not d1.exists() and not d2.exists(), stored(svc)
    assert_error(*svc.request("GET", f"/v1/skills/{name}")[::2], "not_found", 404)
    assert name not in {s["name"] for s in svc.ok("GET", "/v1/skills")["skills"]}
    assert_error(*svc.request("POST", f"/v1/skills/{name}/run", json={"entrypoint": "greet",
                                                                      "args": {"who": "x"}})[::2], "not_found", 404)
    # twice is 404
    assert_error(*svc.request("DELETE", f"/v1/skills/{name}")[::2], "not_found", 404)
    # audited, with who and what
    evs = [e for e in audit_events(svc, kind="skill.deleted") if e["data"]["skill"] == name]
    assert len(evs) == 1 and evs[0]["person_id"], evs
    assert sorted(d["digest"] for d in evs[0]["data"]["deleted"]) == sorted([v1["digest"], v2["digest"]]), evs
    assert_no_orphans(svc)


def test_delete_one_version(svc):
    name = unique("ver")
    v1 = upload(svc, hello_bundle(name=name))
    v2 = upload(svc, hello_bundle(name=name, version="2.0.0", script="print('v2')\n"))
    v3 = upload(svc, hello_bundle(name=name, version="3.0.0", script="print('v3')\n"))
    svc.ok("POST", f"/v1/skills/{name}/promote", json={"digest": v1["digest"]})
    # by version string
    doc = svc.ok("DELETE", f"/v1/skills/{name}/versions/2.0.0")
    assert [(d["version"], d["digest"]) for d in doc["deleted"]] == [("2.0.0", v2["digest"])], doc
    assert not bundle_dir(svc, v2["digest"]).exists() and bundle_dir(svc, v1["digest"]).is_dir()
    got = svc.ok("GET", f"/v1/skills/{name}")
    assert [v["version"] for v in got["versions"]] == ["3.0.0", "1.0.0"] and got["version"] == "1.0.0", got
    # by digest: the promoted one; then no version is promoted and agents are told so
    doc = svc.ok("DELETE", f"/v1/skills/{name}/versions/{v1['digest']}")
    assert [d["version"] for d in doc["deleted"]] == ["1.0.0"], doc
    assert not bundle_dir(svc, v1["digest"]).exists() and bundle_dir(svc, v3["digest"]).is_dir()
    err = skill_run(svc, name, "greet", {"who": "x"}, want=409)
    assert err["error"]["code"] == "not_promoted", err
    assert_error(*svc.request("DELETE", f"/v1/skills/{name}/versions/9.9.9")[::2], "not_found", 404)
    assert_error(*svc.request("GET", f"/v1/skills/{name}/versions/3.0.0")[::2], "method_not_allowed", 405)
    # the last version's delete is the skill's
    svc.ok("DELETE", f"/v1/skills/{name}/versions/3.0.0")
    assert_error(*svc.request("GET", f"/v1/skills/{name}")[::2], "not_found", 404)
    assert not bundle_dir(svc, v3["digest"]).exists()
    assert_no_orphans(svc)


def test_a_shared_bundle_survives_another_workspaces_delete(svc):
    a, b = gov_tenant(svc, "sla"), gov_tenant(svc, "slb")
    name = unique("shared")
    body = hello_bundle(name=name)
    da, db = upload(a.client, body)["digest"], upload(b.client, body)["digest"]
    assert da == db, "the same bundle is stored once, by digest"
    path = bundle_dir(svc, da)
    # a second workspace of A's own organisation holds it too
    ws2 = a.add_workspace(unique("sla-ws2"))
    _, a2 = new_role_person(svc, ws2, unique("sla-admin2"), "admin")
    assert upload(a2, body)["digest"] == da
    doc = a.client.ok("DELETE", f"/v1/skills/{name}")
    assert doc["deleted"][0]["bundle"] == "released", doc
    assert path.is_dir(), "A's delete removed a bundle B still holds"
    a2.ok("DELETE", f"/v1/skills/{name}")
    assert path.is_dir(), "a delete removed a bundle B still holds"
    # B still runs it, from the very files
    status, _, run = b.client.request("POST", f"/v1/skills/{name}/test",
                                      json={"entrypoint": "greet", "args": {"who": "bea"}}, timeout=120)
    assert status == 200 and run["state"] == "succeeded" and run["result"]["stdout"].startswith("hello bea"), run
    b.client.ok("DELETE", f"/v1/skills/{name}")
    assert not path.exists(), "the last holder's delete leaves the bundle behind"
    assert_no_orphans(svc)


def test_bundled_skills_are_not_deleted(svc):
    digests = {s["name"]: s["digest"] for s in svc.ok("GET", "/v1/skills")["skills"] if s["source"] == "bundled"}
    assert BUNDLED <= set(digests)
    for name in sorted(BUNDLED):
        status, _, err = svc.request("DELETE", f"/v1/skills/{name}")
        assert_error(status, err, "conflict", 409)
        assert "bundled skill" in err["error"]["message"] and "cannot be deleted" in err["error"]["message"], err
        status, _, err = svc.request("DELETE", f"/v1/skills/{name}/versions/{digests[name]}")
        assert_error(status, err, "conflict", 409)
        assert bundle_dir(svc, digests[name]).is_dir()
    assert BUNDLED <= {s["name"] for s in svc.ok("GET", "/v1/skills")["skills"]}


def test_only_an_admin_deletes(svc):
    name = unique("mine")
    digest = upload(svc, hello_bundle(name=name))["digest"]
    for role in ("member", "approver"):
        _, who = new_role_person(svc, _workspace(svc), unique(f"sl-{role}"), role)
        for path in (f"/v1/skills/{name}", f"/v1/skills/{name}/versions/1.0.0"):
            status, _, err = who.request("DELETE", path)
            assert_error(status, err, "forbidden", 403)
            assert "admin" in err["error"]["message"], err
    assert svc.ok("GET", f"/v1/skills/{name}")["digest"] == digest and bundle_dir(svc, digest).is_dir()
    svc.ok("DELETE", f"/v1/skills/{name}")


def test_another_tenant_cannot_delete(svc):
    a, b = gov_tenant(svc, "slx"), gov_tenant(svc, "sly")
    name = unique("theirs")
    digest = upload(a.client, hello_bundle(name=name))["digest"]
    a.client.ok("POST", f"/v1/skills/{name}/promote")
    for path in (f"/v1/skills/{name}", f"/v1/skills/{name}/versions/1.0.0",
                 f"/v1/skills/{name}/versions/{digest}"):
        status, _, err = b.client.request("DELETE", path)
        assert_error(status, err, "not_found", 404)
    assert a.client.ok("GET", f"/v1/skills/{name}")["state"] == "promoted" and bundle_dir(svc, digest).is_dir()
    assert not [e for e in audit_events(b.client, kind="skill.deleted")], "B's refused deletes were audited as deletes"
    run = skill_run(a.client, name, "greet", {"who": "al"})
    assert run["state"] == "succeeded", run


# ----------------------------------------------------- runs under way


def test_a_running_run_completes_and_its_bundle_goes_after(svc):
    name = unique("nap")
    digest = upload(svc, slow_bundle(name, name))["digest"]
    svc.ok("POST", f"/v1/skills/{name}/promote")
    status, _, run = svc.request("POST", f"/v1/skills/{name}/run", json={"entrypoint": "nap", "args": {"s": 4}})
    assert status == 201, run
    svc.wait_state(run["id"], {"running"}, timeout=30)
    doc = svc.ok("DELETE", f"/v1/skills/{name}")
    assert doc["live_runs"] == [run["id"]] and doc["deleted"][0]["bundle"] == "kept_for_runs", doc
    assert bundle_dir(svc, digest).is_dir(), "the bundle of a running run was removed"
    # no new run starts from it
    assert_error(*svc.request("POST", f"/v1/skills/{name}/run",
                              json={"entrypoint": "nap", "args": {"s": 0}})[::2], "not_found", 404)
    done = svc.wait_state(run["id"], {"succeeded", "failed", "error", "killed", "timed_out"}, timeout=60)
    assert done["state"] == "succeeded", done
    assert done["result"]["stdout"] == "started\nslept, skill files:\nmarker.txt\nnap.sh\nskill.json\n", done["result"]
    assert wait_gone(bundle_dir(svc, digest)), "the bundle outlived the run that kept it"
    assert_no_orphans(svc)


def test_a_queued_run_awaiting_approval_still_runs(svc):
    t = gov_tenant(svc, "slq")
    _, approver = t.person_in("approver")   # the requester does not decide its own run
    name = unique("wait")
    digest = upload(t.client, slow_bundle(name, name))["digest"]
    t.client.ok("POST", f"/v1/skills/{name}/promote")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    status, _, run = t.client.request("POST", f"/v1/skills/{name}/run", json={"entrypoint": "nap", "args": {"s": 0}})
    assert status == 201 and run["state"] == "pending_approval", run
    doc = t.client.ok("DELETE", f"/v1/skills/{name}")
    assert doc["live_runs"] == [run["id"]], doc
    assert bundle_dir(svc, digest).is_dir()
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    done = t.client.wait_state(run["id"], {"succeeded", "failed", "error"}, timeout=60)
    assert done["state"] == "succeeded" and done["result"]["stdout"].startswith("started\nslept"), done
    assert wait_gone(bundle_dir(svc, digest))
    # a denied one lets its bundle go too
    name2 = unique("deny")
    d2 = upload(t.client, slow_bundle(name2, name2))["digest"]
    t.client.ok("POST", f"/v1/skills/{name2}/promote")
    status, _, run2 = t.client.request("POST", f"/v1/skills/{name2}/run", json={"entrypoint": "nap", "args": {"s": 0}})
    assert status == 201 and run2["state"] == "pending_approval", run2
    t.client.ok("DELETE", f"/v1/skills/{name2}")
    assert bundle_dir(svc, d2).is_dir()
    approver.ok("POST", f"/v1/runs/{run2['id']}/deny", json={"reason": "no"})
    assert wait_gone(bundle_dir(svc, d2))
    assert_no_orphans(svc)


def test_no_orphan_after_a_restart(svc):
    """A bundle nothing refers to (a crash between a delete and its
    collection) is collected when the service starts; shared and bundled
    ones are not."""
    name = unique("keep")
    keep = upload(svc, hello_bundle(name=name))["digest"]
    orphan = svc.state / "skills" / ("sha256-" + "0" * 63 + "1")
    orphan.mkdir()
    (orphan / "skill.json").write_text("{}")
    os.chmod(orphan, 0o755)
    svc.stop()
    svc.start()
    assert not orphan.exists(), "the start left an orphan bundle"
    assert bundle_dir(svc, keep).is_dir()
    assert not [n for n in stored(svc) if n.startswith("tmp_")]
    assert_no_orphans(svc)
    svc.ok("DELETE", f"/v1/skills/{name}")
    assert_no_orphans(svc)
