"""Hostile battery, group O4 (docs/security.md, "O4. Storage is bounded"):
what a tenant with a valid key makes the service store. A run's output is
stored once (not in its result, its stream events and its final event
each); a run's code and output count against the organisation's storage
quota; an ended run keeps its code, output and events for its workspace's
run_retention_s and then only its summary (GET /v1/runs/{id} answers 410
and says what was kept); and code the API accepts reaches its box, however
its JSON escaping grows it. Each case measures the bytes the store holds
for a run (its row's documents and its events' data, on either backend)
or shows the refusal the old service did not make."""
import base64
import json
import time
import uuid

import pytest

from service_util import GOV_TERMINAL, assert_error, audit_events, gov_tenant, put_settings, service, services  # noqa: F401

MIB = 1 << 20


def tag():
    return f"# {uuid.uuid4().hex}\n"


def exact(obj, key):
    if key + "_base64" in obj:
        return base64.b64decode(obj[key + "_base64"])
    return obj[key].encode()


def stored(svc, run_id):
    """(bytes of the run's row documents, bytes of its events' data): what the store holds for it."""
    [(row,)] = svc.sql("SELECT COALESCE(length(code), 0) + COALESCE(length(inputs), 0) + COALESCE(length(result), 0) + "
                       "COALESCE(length(previews), 0) + COALESCE(length(skipped), 0) + "
                       "COALESCE(length(result_summary), 0) FROM runs WHERE id = ?", run_id)
    [(events,)] = svc.sql("SELECT COALESCE(SUM(length(data)), 0) FROM run_events WHERE run_id = ?", run_id)
    return int(row), int(events)


def replay(client, run_id):
    out = {"stdout": b"", "stderr": b""}
    result = None
    for _, ev, data in client.events(run_id, timeout=120):
        if ev in out:
            out[ev] += exact(data, "data")
        elif ev == "result":
            result = data
    return out, result


# ------------------------------------------------ each byte of output once


def test_output_is_stored_once_and_replayed_the_same(service):
    """One run printing 1 MiB stored 3.15 MB (its result, its stream events
    and its final result event each held the output). Now the store holds
    the output once (about 1.05 MB), and the SSE replay and GET
    /v1/runs/{id} still give the same documents: every byte in the stream's
    events, and a result event that is the run as GET shows it."""
    t = gov_tenant(service, "once")
    run = t.client.run(tag() + "import sys\nfor i in range(16):\n"
                       "    sys.stdout.write(str(i % 10) * 65536); sys.stdout.flush()\n")
    assert run["state"] == "succeeded", run
    assert len(run["result"]["stdout"]) == MIB
    row, events = stored(service, run["id"])
    # the old service: ~1.05 MB in the row, ~2.1 MB in the events
    assert row + events < 1.25 * MIB, f"a run that printed 1 MiB holds {row} + {events} bytes in the store"
    out, result = replay(t.client, run["id"])
    assert out["stdout"] == exact(run["result"], "stdout"), "the replayed stream is not the result's output"
    again = t.client.get_run(run["id"])
    assert result == again, "the replayed result event differs from GET /v1/runs/{id}"
    # a late joiner from the middle of the stream gets the rest, exactly
    ids = [i for i, ev, _ in t.client.events(run["id"]) if ev == "stdout"]
    mid = ids[len(ids) // 2]
    tail = b"".join(exact(d, "data") for i, ev, d in t.client.events(run["id"], last_event_id=mid) if ev == "stdout")
    assert exact(run["result"], "stdout").endswith(tail) and len(tail) > 0


def test_code_and_both_streams_store_once(service):
    """900 KB of code and 1 MiB of stdout and stderr stored 7.2 MB; now each
    byte once: about 3 MB. Bytes that are not UTF-8 replay exactly too."""
    t = gov_tenant(service, "both")
    code = tag() + "# " + "c" * 900_000 + "\nimport sys\n" \
        "sys.stdout.buffer.write(b'o\\xff' * (1 << 19)); sys.stdout.flush()\n" \
        "sys.stderr.write('e' * (1 << 20))\n"
    run = t.client.run(code)
    assert run["state"] == "succeeded", run
    row, events = stored(service, run["id"])
    # once each: the code, stderr's text, stdout's exact bytes as base64
    # (4/3: its text form, U+FFFD for each 0xff, is made again on read)
    assert row + events < 900_000 + MIB + 4 * MIB / 3 + 20_000, \
        f"900 KB of code and 2 MiB of output hold {row} + {events} bytes"
    out, result = replay(t.client, run["id"])
    assert out["stdout"] == b"o\xff" * (1 << 19) == exact(run["result"], "stdout")
    assert out["stderr"] == b"e" * MIB
    assert result == t.client.get_run(run["id"])


def test_redacted_output_is_not_deduplicated_wrongly(service):
    """Where the stream's redaction and the result's differ, each keeps its
    own (never the unredacted bytes): a DLP pattern across the output."""
    t = gov_tenant(service, "dlp")
    put_settings(t.client, dlp_patterns=[{"name": "tok", "pattern": "SECRET[0-9]+"}])
    run = t.client.run(tag() + "print('a SECRET1234 b')\nprint('x' * 100)\n")
    assert run["state"] == "succeeded", run
    out, result = replay(t.client, run["id"])
    assert b"SECRET1234" not in out["stdout"] and b"SECRET1234" not in exact(run["result"], "stdout")
    assert result == t.client.get_run(run["id"])


def test_a_denied_runs_result_event_holds_no_copy_of_its_code(service):
    """Every result event names its run: a denied run's (its approval card
    holds its code) was a third copy of 500 KB of code in the events."""
    t = gov_tenant(service, "deny")
    put_settings(t.client, approval_policy="always")
    _, approver = t.person_in("approver")
    run = t.client.run(tag() + "#" + "d" * 500_000 + "\nprint(1)\n", wait=False)
    assert run["state"] == "pending_approval", run
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "no"}, timeout=30)
    assert status == 200, (status, doc)
    ended = t.client.wait_state(run["id"], {"denied"})
    _, events = stored(service, run["id"])
    assert events < 10_000, f"a denied run's events hold {events} bytes"
    _, result = replay(t.client, run["id"])
    assert result == t.client.get_run(run["id"]) and result["state"] == "denied" == ended["state"]


# ------------------------------------------------ the storage quota


def test_runs_count_against_the_storage_quota(service):
    """A run's code and output are the organisation's storage: with a 3 MiB
    quota, runs that print 1 MiB each fill it, and the next run is refused
    with 507 quota_exceeded (the old service counted only artifacts and
    skills, and took runs for ever)."""
    t = gov_tenant(service, "quota")
    service.sql("UPDATE orgs SET storage_quota_bytes = ? WHERE id = ?", 3 * MIB, t.org)
    code = tag() + "import sys\nsys.stdout.write('q' * (1 << 20))\n"
    ran = 0
    for _ in range(6):
        status, _, doc = t.client.post_run(code, wait=True)
        if status == 507:
            assert_error(status, doc, "quota_exceeded", 507)
            assert "runs" in doc["error"]["message"], doc
            break
        assert status in (200, 201), (status, doc)
        t.client.wait_state(doc["id"], GOV_TERMINAL)
        ran += 1
    else:
        pytest.fail("six runs of 1 MiB each were taken under a 3 MiB storage quota")
    assert 2 <= ran <= 3, f"{ran} runs of 1 MiB fit a 3 MiB quota"
    # code alone counts too: 900 KB of code does not fit what is left
    status, _, doc = t.client.request("POST", "/v1/runs", json={"language": "python", "code": "#" + "k" * 900_000})
    assert_error(status, doc, "quota_exceeded", 507)


# ------------------------------------------------ retention


@pytest.fixture
def sweeping(services):
    """A service that sweeps every second (run_sweep_s = 1)."""
    return services.start("sweep", {"max_concurrent": 4, "run_sweep_s": 1})


def test_runs_expire_after_the_workspace_retention(sweeping):
    """A workspace's run_retention_s (seconds; 30 days by default) bounds how
    long a run keeps its code, output and events: then GET /v1/runs/{id}
    answers 410 with what was kept (its summary: state, exit, sizes, times),
    its events answer 410, its audit events stay, its bytes leave the
    organisation's count, and a workspace with the default keeps its runs."""
    svc = sweeping
    keep = gov_tenant(svc, "keep")
    t = gov_tenant(svc, "ret")
    doc = t.client.ok("GET", "/v1/settings")
    assert doc["run_retention_s"] == 30 * 86400, doc
    put_settings(t.client, run_retention_s=2)
    kept = keep.client.run(tag() + "print('kept')\n")
    run = t.client.run(tag() + "import sys\nsys.stdout.write('r' * 300000)\n")
    assert run["state"] == "succeeded"
    row, events = stored(svc, run["id"])
    assert row + events > 300000
    [(counted,)] = svc.sql("SELECT run_bytes FROM orgs WHERE id = ?", t.org)
    assert counted >= 300000, counted
    deadline = time.monotonic() + 30
    while True:
        status, _, doc = t.client.request("GET", f"/v1/runs/{run['id']}")
        if status == 410:
            break
        assert status == 200 and time.monotonic() < deadline, f"the run never expired: {status} {doc!r}"
        time.sleep(0.3)
    assert_error(status, doc, "expired", 410)
    assert "run_retention_s" in doc["error"]["message"]
    summary = doc["run"]
    assert summary["id"] == run["id"] and summary["state"] == "succeeded" and summary["expired_at"]
    assert summary["result"]["exit_code"] == 0 and summary["result"]["stdout_bytes"] == 300000
    assert "stdout" not in summary["result"]
    for route in ("events", "trace"):
        status, _, edoc = t.client.request("GET", f"/v1/runs/{run['id']}/{route}")
        assert status == 410 and edoc["run"]["id"] == run["id"], (route, status, edoc)
    row, events = stored(svc, run["id"])
    assert row + events < 2000, f"an expired run still holds {row} + {events} bytes"
    [(counted,)] = svc.sql("SELECT run_bytes FROM orgs WHERE id = ?", t.org)
    assert counted < 2000, counted
    # the audit trail outlives the output
    assert any(e.get("run_id") == run["id"] for e in audit_events(t.client)), "the run's audit events went with it"
    # it is still listed, as its summary
    assert any(r["id"] == run["id"] for r in t.client.list_runs())
    # the other workspace (the default 30 days) keeps its run
    assert keep.client.get_run(kept["id"])["result"]["stdout"] == "kept\n"
    # one node claimed each sweep: the store says which
    [(node,)] = svc.sql("SELECT node_id FROM sweeps WHERE name = 'runs'")
    assert node


def test_retention_setting_is_checked(service):
    """run_retention_s is a whole number of seconds from 1 to ten years."""
    t = gov_tenant(service, "retchk")
    assert put_settings(t.client, run_retention_s=3600)["run_retention_s"] == 3600
    assert t.client.ok("GET", "/v1/settings")["run_retention_s"] == 3600
    for bad in (0, -1, 1.5, "30d", 3650 * 86400 + 1):
        status, _, doc = t.client.request("PUT", "/v1/settings", json={"run_retention_s": bad})
        assert status == 400, (bad, status, doc)


# ------------------------------------------------ what the API accepts, the run carries


def test_code_whose_escaped_job_passes_1_mib_runs(service):
    """900 KB of code full of quotes, backslashes, newlines and control
    characters is under code_max, but its JSON-escaped job was past the
    helper's 1 MiB: it ended `error` (refunded, its code kept). Now the
    job's cap is sized from the API's caps and the run succeeds."""
    t = gov_tenant(service, "esc")
    body = ('#"\\\x01\x1b\t' * 150_000)[:900_000]
    code = tag() + body + "\nprint('carried', len(open(__file__).read()))\n"
    run = t.client.run(code)
    assert run["state"] == "succeeded", f"{run['state']}: {run.get('error')!r}"
    assert run["result"]["stdout"].startswith("carried")


def test_worst_case_code_and_args_reach_the_box(service):
    """Near the most the API takes (its body is at most 8 MiB): 1 MiB of
    code of control characters (six bytes each escaped) and 64 arguments
    of 4 KiB of them: a job of 7.5 MiB, which the helper takes (the old
    helper read at most 1 MiB: the run ended `error`)."""
    t = gov_tenant(service, "worst")
    code = "import sys\nprint(len(sys.argv) - 1, sum(map(len, sys.argv[1:])))\n#"
    code += "\x01" * ((1 << 20) - len(code))
    args = ["\x02" * 4096] * 64
    status, _, doc = t.client.post_run(code, wait=True, args=args)
    assert status in (200, 201), (status, json.dumps(doc)[:500])
    run = t.client.wait_state(doc["id"], GOV_TERMINAL, timeout=120)
    assert run["state"] == "succeeded", f"{run['state']}: {run.get('error')!r}"
    assert run["result"]["stdout"].split() == ["64", str(64 * 4096)]
