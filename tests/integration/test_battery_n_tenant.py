"""Hostile battery, group N (SECURITY.md section 6): one tenant against the
daemon, the data side.  A tenant with a valid key controls its scripts'
output bytes, its workspace's DLP patterns, how many runs it queues, what it
uploads with runs that never start, and how it lists runs; none of it may
make the daemon hold unbounded memory or CPU, starve other tenants, keep
bytes outside any quota, or turn a run's own output into airlock's failure.
Each case is differential: it shows the ingredient working (a naive engine
really is catastrophic, the bytes really are there, the queue really is
full for the attacker) and then that airlock is not fooled."""
import base64
import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from service_util import (GOV_TERMINAL, TERMINAL, b64, gov_tenant, new_role_person, put_settings, service,  # noqa: F401
                          services, set_price)


def exact(obj, key):
    """The exact bytes of output KEY of OBJ (docs/api.md: KEY_base64 when the text is not them)."""
    if key + "_base64" in obj:
        return base64.b64decode(obj[key + "_base64"])
    return obj[key].encode()


def stream_bytes(client, run_id, kind="stdout"):
    out = b""
    for _, ev, data in client.events(run_id, timeout=60):
        if ev == kind:
            out += exact(data, "data")
    return out


def tag():
    return f"# {uuid.uuid4().hex}\n"


# ------------------------------------------------ output bytes (issue 16)


def test_output_bytes_nul_and_invalid_utf8_are_carried_exactly(service):
    """A NUL or bytes that are not UTF-8 in a run's output are the run's own
    business: the run succeeds, its text shows them as U+FFFD, and
    stdout_base64 (and each event's data_base64) carries them exactly."""
    t = gov_tenant(service, "nbytes")
    raw = b"a\x00b\n" + b"x\x80\xffy \xc3\xa9 \xe2\x82\n" + b"tail\x00"
    code = tag() + ("import sys\nsys.stdout.write('a\\x00b\\n'); sys.stdout.flush()\n"
                    "sys.stdout.buffer.write(b'x\\x80\\xffy \\xc3\\xa9 \\xe2\\x82\\n'); sys.stdout.flush()\n"
                    "sys.stdout.buffer.write(b'tail\\x00'); sys.stdout.flush()\n"
                    "sys.stderr.buffer.write(b'e\\x00\\xfe\\n')\n")
    run = t.client.run(code)
    assert run["state"] == "succeeded", f"the run's own bytes made it end {run['state']}: {run['error']!r}"
    res = run["result"]
    assert exact(res, "stdout") == raw
    assert exact(res, "stderr") == b"e\x00\xfe\n"
    # the text is valid UTF-8 without NUL: each byte that cannot be shown is U+FFFD
    assert res["stdout"] == "a\ufffdb\nx\ufffd\ufffdy \u00e9 \ufffd\ufffd\ntail\ufffd"
    assert "\x00" not in res["stdout"] and "\x00" not in res["stderr"]
    assert stream_bytes(t.client, run["id"]) == raw
    assert stream_bytes(t.client, run["id"], "stderr") == b"e\x00\xfe\n"
    trace = t.client.ok("GET", f"/v1/runs/{run['id']}/trace")
    assert exact(trace["output"], "stdout") == raw and exact(trace["output"], "stderr") == b"e\x00\xfe\n"
    # clean text has no base64 beside it
    clean = t.client.run(tag() + "print('plain \u00e9 text')")
    assert clean["result"]["stdout"] == "plain \u00e9 text\n" and "stdout_base64" not in clean["result"]


def test_output_nul_as_python_str_through_the_api(service):
    """The report of issue 16, as it was sent."""
    run = service.run('import sys; sys.stdout.write("a\\x00b\\n")')
    assert run["state"] == "succeeded", run
    assert exact(run["result"], "stdout") == b"a\x00b\n"


def test_secrets_around_nul_and_invalid_bytes_are_redacted(service):
    """Redaction works on the bytes: secrets next to NULs and invalid bytes
    are replaced, and every byte around them is kept exactly."""
    t = gov_tenant(service, "nred")
    aws = "AKIA" + uuid.uuid4().hex[:16].upper()
    ghp = "ghp_" + uuid.uuid4().hex[:30]
    half = len(aws) // 2
    code = tag() + (
        "import sys\n"
        f"a = {aws[:half]!r} + {aws[half:]!r}\n"
        f"g = {ghp[:10]!r} + {ghp[10:]!r}\n"
        "sys.stdout.buffer.write(b'\\x00' + a.encode() + b'\\x00tail\\xff' + g.encode() + b'\\n')\n"
        "sys.stdout.flush()\n"
        "sys.stderr.buffer.write(g.encode() + b'\\x00\\x80' + a.encode())\n")
    run = t.client.run(code)
    assert run["state"] == "succeeded", run
    want = b"\x00[REDACTED:aws_access_key]\x00tail\xff[REDACTED:github_token]\n"
    assert exact(run["result"], "stdout") == want
    assert exact(run["result"], "stderr") == b"[REDACTED:github_token]\x00\x80[REDACTED:aws_access_key]"
    assert stream_bytes(t.client, run["id"]) == want
    assert run["redactions"] == 4
    everything = json.dumps(t.client.get_run(run["id"])) + json.dumps(t.client.events(run["id"]))
    for s in (aws, ghp):
        assert s not in everything
        assert base64.b64encode(s.encode()).decode()[:16] not in everything


# ------------------------------------------------ DLP patterns of bounded cost

# glibc's POSIX engine, the one airlock used before: what it costs on the host
REGCOMP_PROBE = r"""
import ctypes, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
libc = ctypes.CDLL(None)
buf = ctypes.create_string_buffer(256)
print(libc.regcomp(buf, sys.argv[1].encode(), 1), flush=True)   # REG_EXTENDED
"""
REGEXEC_PROBE = r"""
import ctypes, sys
libc = ctypes.CDLL(None)
buf = ctypes.create_string_buffer(256)
assert libc.regcomp(buf, sys.argv[1].encode(), 1) == 0
print("start", flush=True)
print(libc.regexec(buf, sys.argv[2].encode(), 0, None, 0), flush=True)
"""


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_dlp_pattern_compile_bomb_refused_at_settings_time(request):
    """(a{1,32767}){1,32767}: a naive engine needs more than a GiB to compile
    it; airlock refuses it with a 400 and its memory does not move."""
    import resource
    from service_util import ServiceSet
    bomb = "(a{1,32767}){1,32767}"
    probe = subprocess.run([sys.executable, "-c", REGCOMP_PROBE, bomb], capture_output=True, text=True, timeout=300)
    assert probe.stdout.strip() == "12", f"control: glibc regcomp within 1 GiB should fail REG_ESPACE: {probe!r}"
    ss = ServiceSet(request)
    try:
        svc = ss.start("dlpbomb")
        pid = svc.proc.pid
        # a naive build would take the host down: a GiB of room is plenty to show it
        room = status_kib(pid, "VmSize") * 1024 + (1 << 30)
        resource.prlimit(pid, resource.RLIMIT_AS, (room, room))
        t = gov_tenant(svc, "bomb")
        before = status_kib(pid, "VmHWM")
        status, _, doc = t.client.request("PUT", "/v1/settings", timeout=300,
                                          json={"dlp_patterns": [{"name": "bomb", "pattern": bomb}]})
        grown = status_kib(pid, "VmHWM") - before
        assert grown < 64 * 1024, f"compiling one pattern took the daemon's peak memory up {grown} KiB"
        assert status == 400 and doc["error"]["code"] == "bad_request", (status, doc)
        assert "too large" in doc["error"]["message"], doc
        # the settings were not changed, and ordinary patterns still are accepted
        assert t.client.ok("GET", "/v1/settings")["dlp_patterns"] == []
        put_settings(t.client, dlp_patterns=[{"name": "ok", "pattern": "(a{1,100}){1,3}"}])
    finally:
        ss.close()


def test_dlp_backreferences_cannot_stall_the_daemon(service):
    """(.*)(.*)\\2\\1x backtracks for seconds per 150-byte line in a naive
    engine, and while the runner is stuck in it nothing reads the box's
    output. With bounded matching the run's 1000 such lines pass at once and
    its wall clock ends it as timed_out."""
    pat = r"(.*)(.*)\2\1x"
    line = "a" * 150
    p = subprocess.Popen([sys.executable, "-c", REGEXEC_PROBE, pat, line], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "start"
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(timeout=2)   # control: glibc is still backtracking on one line
    finally:
        p.kill()
        p.wait()
    t = gov_tenant(service, "backref")
    put_settings(t.client, dlp_patterns=[{"name": "backref", "pattern": pat}])
    code = tag() + ("import sys\n"
                    f"for i in range(1000): sys.stdout.write({line!r} + '\\n')\n"
                    "sys.stdout.flush()\n"
                    "while True: pass\n")
    status, _, run = t.client.post_run(code, limits={"timeout_s": 3})
    assert status == 201, run
    deadline = time.monotonic() + 120
    while True:
        run = t.client.get_run(run["id"])
        if run["state"] in GOV_TERMINAL:
            break
        assert time.monotonic() < deadline, f"the run never ended: the daemon is stuck redacting: {run['state']}"
        time.sleep(0.2)
    assert run["state"] == "timed_out", run
    assert run["result"]["stdout"] == (line + "\n") * 1000


def test_dlp_match_that_reaches_its_limit_withholds_the_line(service):
    """^(a+)+$ on 40 a's and a '!' has 2^40 ways to fail: the match stops at
    its limit, and since airlock cannot tell whether the line holds what the
    pattern is for, it withholds the line (fails closed). The PCRE2 dialect
    (\\d) works."""
    t = gov_tenant(service, "limit")
    put_settings(t.client, dlp_patterns=[{"name": "evil", "pattern": "^(a+)+$"},
                                         {"name": "emp", "pattern": r"\bEMP\d{6}\b"}])
    run = t.client.run(tag() + "print('aaaa'); print('a' * 40 + '!'); print('bbb EMP' + '123456 end')")
    assert run["state"] == "succeeded", run
    assert run["result"]["stdout"] == "[REDACTED:evil]\n[REDACTED:evil]\nbbb [REDACTED:emp] end\n"
    assert run["redactions"] == 3


# ------------------------------------------------ lists carry summaries


BIG_RUN = r"""
import os, sys
os.makedirs('/out/preview', exist_ok=True)
for i in range(8):
    with open(f'/out/preview/p{i}.bin', 'wb') as f:
        f.write(os.urandom((1 << 20) - 4096))
sys.stdout.write('o' * ((1 << 20) - 10)); sys.stdout.flush()
sys.stderr.write('e' * ((1 << 20) - 10)); sys.stderr.flush()
"""


def test_run_list_holds_summaries_not_outputs(service):
    """Ten runs of ~13 MiB each (1 MiB stdout, 1 MiB stderr, 8 previews of
    1 MiB inlined as base64): GET /v1/runs?limit=200 used to hold them all at
    once in the daemon. A list entry is a summary (sizes, counts, truncated
    flags); the big fields come one run at a time from GET /v1/runs/{id}."""
    t = gov_tenant(service, "biglist")
    ids = []
    for i in range(10):
        status, _, doc = t.client.post_run(tag() + BIG_RUN, limits={"timeout_s": 60})
        assert status == 201, doc
        ids.append(doc["id"])
    for rid in ids:
        run = t.client.wait_state(rid, GOV_TERMINAL, timeout=240)
        assert run["state"] == "succeeded", run
    # the ingredient: each run really is that big
    one = t.client.get_run(ids[0])
    assert len(one["result"]["stdout"]) > (1 << 20) - 100 and len(one["result"]["stderr"]) > (1 << 20) - 100
    assert len(one["previews"]) == 8 and all(len(p["content_base64"]) > 1300000 for p in one["previews"])
    pid = service.proc.pid
    before = status_kib(pid, "VmHWM")
    status, _, doc = t.client.request("GET", "/v1/runs", query={"limit": "200"}, timeout=300)
    grown = status_kib(pid, "VmHWM") - before
    assert status == 200, doc
    assert grown < 40 * 1024, f"one list request took the daemon's peak memory up {grown} KiB"
    listed = {r["id"]: r for r in doc["runs"]}
    assert set(ids) <= set(listed)
    text = json.dumps(doc)
    assert len(text) < 200 * 1024, f"a list of 10 runs is {len(text)} bytes"
    for rid in ids:
        r = listed[rid]
        assert r["state"] == "succeeded" and r["summary"] is True
        assert "stdout" not in r["result"] and "stderr" not in r["result"] and "controls" not in r["result"]
        assert r["result"]["exit_code"] == 0
        assert r["result"]["stdout_bytes"] == (1 << 20) - 10 and r["result"]["stderr_bytes"] == (1 << 20) - 10
        assert r["result"]["stdout_truncated"] is False
        assert r["preview_count"] == 8 and r["artifact_count"] == len(one["artifacts"]) and r["skipped_count"] == 0
        assert "previews" not in r and "artifacts" not in r


# ------------------------------------------------ keys can be revoked and rotated


def key_id_of(svc, key):
    """The key id of KEY in `airlock admin list` (its prefix is listed)."""
    for line in svc.admin("list").splitlines():
        m = re.search(r"\bid=(key_[A-Za-z0-9]+)\b.*\bkey=([A-Za-z0-9_]+)\.\.\.", line)
        if m and key.startswith(m.group(2)):
            return m.group(1)
    raise AssertionError(f"key {key[:10]}... not in airlock admin list")


def test_key_revoke_and_rotate(service):
    """A leaked key is revoked through the real CLI and gets 401 on its very
    next request (HTTP and Piston's key-in-the-path), while the daemon keeps
    running; a rotated key's successor works and the old one does not; both
    are audited in the owner's workspace."""
    t = gov_tenant(service, "keys")
    _, member = t.person_in("member")
    _, other = t.person_in("member")
    # the ingredient: both keys work
    assert member.request("GET", "/v1/runs")[0] == 200
    assert other.request("GET", "/v1/runs")[0] == 200
    kid = key_id_of(service, member.key)
    out = service.admin("key", "revoke", kid)
    assert kid in out, out
    status, _, doc = member.request("GET", "/v1/runs")
    assert status == 401, (status, doc)
    assert member.post_run("print(1)")[0] == 401
    status, _, _ = member.request("GET", f"/piston/{member.key}/api/v2/runtimes")
    assert status == 401
    assert other.request("GET", "/v1/runs")[0] == 200, "revoking one key touched another"
    # revoking it twice, or a key that does not exist, is an error
    p = service.admin_run("key", "revoke", kid, text=True)
    assert p.returncode != 0 and "revoked already" in p.stderr, p
    p = service.admin_run("key", "revoke", "key_nosuchkey", text=True)
    assert p.returncode != 0 and "no key" in p.stderr, p

    # rotation: a new secret for the same person, the old one refused at once
    oid = key_id_of(service, other.key)
    run = other.run(tag() + "print('before rotation')")
    out = service.admin("key", "rotate", oid)
    new_key = re.search(r"api key: (al_[A-Za-z0-9_\-]+)", out).group(1)
    assert new_key != other.key
    assert other.request("GET", "/v1/runs")[0] == 401
    rotated = service.with_key(new_key)
    assert rotated.get_run(run["id"])["id"] == run["id"], "the new key is not the same person's"
    assert rotated.run(tag() + "print('after')")["state"] == "succeeded"
    p = service.admin_run("key", "rotate", oid, text=True)
    assert p.returncode != 0 and "revoked" in p.stderr, p

    events = t.client.ok("GET", "/v1/audit", query={"limit": "1000"})["events"]
    kinds = [(e["kind"], e["data"]) for e in events if e["kind"].startswith("key.")]
    assert ("key.revoked", {"key_id": kid, "via": "airlock admin"}) in kinds, kinds
    new_id = key_id_of(service, new_key)
    assert ("key.rotated", {"key_id": oid, "new_key_id": new_id, "via": "airlock admin"}) in kinds, kinds
    assert "intact" in service.admin("audit", "verify")



# ------------------------------------------------ a bounded share of the queue

BLOCKER = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"


def block(client):
    """A run of CLIENT's person that holds its one concurrency slot until canceled."""
    run = client.run(tag() + BLOCKER, wait=False, limits={"timeout_s": 120})
    client.wait_state(run["id"], "running", timeout=60)
    return run


def test_one_person_cannot_fill_the_queue(services):
    """A person whose runs cannot start (its concurrency is busy) keeps
    creating runs: the 101st is 429 naming the per-person share, long before
    the service-wide queue (150 here) is full, and another tenant's run
    still gets in and runs."""
    svc = services.start("qshare", {"queue_max": 150, "max_concurrent": 2, "per_person_concurrency": 1})
    a = gov_tenant(svc, "qa")
    b = gov_tenant(svc, "qb")
    block(a.client)
    accepted, refused = 0, None
    for i in range(120):
        status, _, doc = a.client.post_run(f"print({i})")
        if status == 201:
            accepted += 1
            assert doc["state"] == "queued", doc
        else:
            refused = (status, doc)
            break
    assert accepted == 100, f"one person queued {accepted} runs (refused: {refused})"
    status, doc = refused
    assert status == 429 and doc["error"]["code"] == "queue_full", refused
    assert "queue_per_person" in doc["error"]["message"], doc
    # the refused run left nothing: no record, no files
    assert len(a.client.list_runs(state="queued")) == 100
    run = b.client.run(tag() + "print('other tenant')")
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "other tenant\n", run


def test_one_organisation_cannot_fill_the_queue(services):
    """The organisation's share: two people of one organisation together
    stop at queue_per_org; a third person of another organisation gets in."""
    svc = services.start("qorg", {"queue_per_org": 4, "queue_per_person": 3, "max_concurrent": 4,
                                  "per_person_concurrency": 1})
    a = gov_tenant(svc, "oa")
    _, p2 = a.person_in("member")
    other = gov_tenant(svc, "ob")
    block(a.client)
    block(p2)
    for _ in range(3):
        assert a.client.post_run("print(1)")[0] == 201
    status, _, doc = a.client.post_run("print(1)")
    assert status == 429 and "queue_per_person" in doc["error"]["message"], doc
    assert p2.post_run("print(2)")[0] == 201
    status, _, doc = p2.post_run("print(2)")
    assert status == 429 and "queue_per_org" in doc["error"]["message"], doc
    block(other.client)
    assert other.client.post_run("print(3)")[0] == 201


def test_runs_that_could_never_be_paid_are_refused_402(service):
    """Runs are charged when they start, so the credits of runs that wait are
    spoken for: a run the rest cannot pay for is 402 at creation (naming what
    the waiting runs hold), not a queued run holding a place until it fails."""
    t = gov_tenant(service, "unpaid")
    set_price(service, t.workspace, 300)
    put_settings(t.client, concurrency=1)
    blocker = block(t.client)
    assert t.client.ok("GET", "/v1/usage")["balance"] == 700
    b = t.client.run("print('b')", wait=False)
    c = t.client.run("print('c')", wait=False)
    status, _, doc = t.client.post_run("print('d')")
    assert status == 402 and doc["error"]["code"] == "payment_required", (status, doc)
    assert "600" in doc["error"]["message"] and "queued" in doc["error"]["message"], doc
    # what is released is available again
    assert t.client.cancel(c["id"])[0] == 202
    d = t.client.run("print('d')", wait=False)
    for r in (blocker, b, d):
        t.client.cancel(r["id"])
    for r in (b, c, d):
        assert t.client.wait_state(r["id"], GOV_TERMINAL, timeout=60)["state"] == "canceled"


# ------------------------------------------------ inputs of runs that never start


def input_dir(svc, run_id):
    return svc.state / "runs" / run_id


FILES = [{"name": "data.bin", "content_base64": b64(b"x" * 5000)}]


def test_inputs_removed_when_a_queued_run_is_canceled(service):
    t = gov_tenant(service, "incancel")
    put_settings(t.client, concurrency=1)
    blocker = block(t.client)
    run = t.client.run("print(open('data.bin').read())", wait=False, files=FILES, stdin="hello")
    assert t.client.get_run(run["id"])["state"] == "queued"
    d = input_dir(service, run["id"])
    assert (d / "in" / "data.bin").read_bytes() == b"x" * 5000 and (d / "stdin").read_text() == "hello"
    assert t.client.cancel(run["id"])[0] == 202
    assert t.client.get_run(run["id"])["state"] == "canceled"
    assert not d.exists(), f"a canceled run's inputs stay on disk: {list(d.rglob('*'))}"
    t.client.cancel(blocker["id"])


def approval_tenant(svc, prefix, ttl):
    t = gov_tenant(svc, prefix)
    put_settings(t.client, approval_policy="always", approval_ttl_s=ttl)
    _, member = t.person_in("member")
    _, approver = t.person_in("approver")
    return t, member, approver


def test_inputs_removed_when_a_run_is_denied(service):
    t, member, approver = approval_tenant(service, "indeny", 600)
    run = member.run("print(1)", wait=False, files=FILES)
    assert run["state"] == "pending_approval"
    d = input_dir(service, run["id"])
    assert (d / "in" / "data.bin").exists()
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "no"})
    assert status in (200, 202), (status, doc)
    assert member.wait_state(run["id"], "denied", timeout=30)
    assert not d.exists(), "a denied run's inputs stay on disk"


def test_inputs_removed_when_an_approval_expires(service):
    t, member, _ = approval_tenant(service, "inexp", 1)
    run = member.run("print(1)", wait=False, files=FILES)
    d = input_dir(service, run["id"])
    assert (d / "in" / "data.bin").exists()
    done = member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    assert done["state"] == "denied" and done["error"]["code"] == "expired", done
    # the sweep moves the run to denied, then drops its inputs, then
    # publishes its result: the result is the point they are gone by
    assert member.events(run["id"], timeout=30)[-1][1] == "result"
    assert not d.exists(), "an expired run's inputs stay on disk"


def test_inputs_removed_when_canceled_while_pending_approval(service):
    t, member, _ = approval_tenant(service, "inpend", 600)
    run = member.run("print(1)", wait=False, stdin="in")
    d = input_dir(service, run["id"])
    assert (d / "stdin").exists()
    assert member.cancel(run["id"])[0] == 202
    assert not d.exists(), "a withdrawn run's inputs stay on disk"


def test_leftover_inputs_swept_at_start(services):
    """Inputs left behind (a run that ended while the daemon was down, or a
    crash before their removal) are removed at start-up; those of runs that
    still wait are kept."""
    svc = services.start("sweep")
    t, member, _ = approval_tenant(svc, "sweep", 600)
    waiting = member.run("print(1)", wait=False, files=FILES)
    assert waiting["state"] == "pending_approval"
    svc.stop()
    stale = input_dir(svc, "run_leftoverfromacrash")
    (stale / "in").mkdir(parents=True)
    (stale / "in" / "big").write_bytes(b"y" * 4096)
    svc.start()
    assert not stale.exists(), "leftover inputs survived a restart"
    assert (input_dir(svc, waiting["id"]) / "in" / "data.bin").exists(), "a waiting run lost its inputs"
    member.cancel(waiting["id"])
    assert not input_dir(svc, waiting["id"]).exists()


def test_inputs_of_waiting_runs_count_against_the_storage_quota(services):
    """With 1 MiB of storage, a queued run's 600 KiB of files hold their
    place: a second such run is 507; once the first is canceled (its inputs
    removed) there is room again."""
    svc = services.start("quota", {"storage_quota_mb": 1, "per_person_concurrency": 1})
    t = gov_tenant(svc, "quota")
    block(t.client)
    big = [{"name": "big.bin", "content_base64": b64(os.urandom(600 * 1024))}]
    first = t.client.run("print(1)", wait=False, files=big)
    assert first["state"] == "queued"
    status, _, doc = t.client.post_run("print(2)", files=big)
    assert status == 507 and doc["error"]["code"] == "quota_exceeded", (status, doc)
    assert t.client.cancel(first["id"])[0] == 202
    assert t.client.post_run("print(3)", files=big)[0] == 201


# ------------------------------------------------ stored output and wake-ups


def test_output_events_per_run_are_bounded(service):
    """A line per write was an event each, stored and broadcast: 5000 lines
    written a millisecond apart made about 5000 events. Past a thousand,
    pieces are joined: the stream still carries every byte, in order."""
    t = gov_tenant(service, "chatty")
    code = tag() + "import time\nfor i in range(5000):\n    print(i % 10, flush=True)\n    time.sleep(0.001)\n"
    run = t.client.run(code)
    assert run["state"] == "succeeded", run
    want = "".join(f"{i % 10}\n" for i in range(5000)).encode()
    assert exact(run["result"], "stdout") == want
    evs = [d for _, e, d in t.client.events(run["id"], timeout=120) if e == "stdout"]
    assert b"".join(exact(d, "data") for d in evs) == want
    assert len(evs) <= 1000 + 100, f"{len(evs)} stored output events for one run"


def ctxt_switches(pid):
    """PID's threads' voluntary context switches: a thread that waits and
    is woken makes one; the involuntary ones are the machine's load (a
    parallel pass's other worker), not the daemon's doing."""
    n = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        n += int(line.split()[1])
        except OSError:
            pass
    return n


def test_one_runs_output_does_not_wake_other_runs_followers(services):
    """Followers of other tenants' runs (event streams on runs that wait for
    an approval) are not woken by one run's output: the daemon's context
    switches while a chatty run prints are about the same with twelve idle
    followers as with none (they were woken, and queried the store, once per
    event each)."""
    import http.client
    svc = services.start("herd")
    chat = gov_tenant(svc, "herdchat")
    code = tag() + "import time\nfor i in range(800):\n    print(i, flush=True)\n    time.sleep(0.001)\n"

    def chatty():
        before = ctxt_switches(svc.proc.pid)
        run = chat.client.run(code)
        assert run["state"] == "succeeded", run
        n = len([1 for _, e, _ in chat.client.events(run["id"]) if e == "stdout"])
        return ctxt_switches(svc.proc.pid) - before, n

    alone, n_alone = chatty()
    conns = []
    try:
        for k in range(6):
            t, member, _ = approval_tenant(svc, f"herd{k}", 600)
            for _ in range(2):
                run = member.run("print(1)", wait=False)
                c = http.client.HTTPConnection(svc.host, svc.port, timeout=60)
                c.request("GET", f"/v1/runs/{run['id']}/events",
                          headers={"Authorization": f"Bearer {member.key}", "Accept": "text/event-stream"})
                resp = c.getresponse()
                assert resp.status == 200
                assert resp.readline().startswith(b"id:")   # the follower is there and waits
                conns.append(c)
        watched, n = chatty()
    finally:
        for c in conns:
            c.close()
    assert n >= 400 and n_alone >= 400, (n, n_alone)
    extra = watched - alone
    assert extra < 3 * n, (f"{len(conns)} idle followers cost {extra} more context switches over {n} output "
                           f"events of another run ({alone} without them)")
