"""Governance (docs/api.md): DLP.  Each well-known secret format, and a
workspace dlp_pattern, printed by a run (whole, split across two output
chunks, on stderr, without a final newline) never comes back through the
API: not in result.stdout/stderr, not in the event stream (not even once its
chunks are joined), not in the audit tool.call preview, the trace or the run
list; each becomes [REDACTED:kind], the run's `redactions` counts them, and the
unredacted output is not stored in the service's state directory nor its store."""
import json
import random
import re
import string
import time
import uuid

import pytest

from service_util import (GOV_TERMINAL, audit_events, gov_tenant, put_settings, service)  # noqa: F401

RNG = random.SystemRandom()
MARK = re.compile(r"\[REDACTED:[A-Za-z0-9_.\-]+\]")
ALNUM = string.ascii_letters + string.digits


def rand(n, alphabet=ALNUM):
    return "".join(RNG.choice(alphabet) for _ in range(n))


def make_secrets():
    """{kind: (text printed (may span lines), [sensitive substrings that must never come back])}."""
    out = {}
    s = "AKIA" + rand(16, string.ascii_uppercase + "234567")
    out["aws_access_key"] = (f"key id {s} in use", [s])
    s = rand(40, ALNUM + "/+")
    out["aws_secret_key"] = (f"aws_secret_access_key = {s}", [s])
    body = [rand(64, ALNUM + "+/") for _ in range(3)]
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    out["private_key"] = (pem, body)
    s = rand(40, ALNUM + "._-")
    out["bearer"] = (f"Authorization: Bearer {s}", [s])
    s = "ghp_" + rand(36)
    out["github"] = (f"token={s}", [s])
    s = "xoxb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24)
    out["slack"] = (f"slack {s}", [s])
    s = "sk-" + rand(48)
    out["openai"] = (f"OPENAI {s}", [s])
    s = "AIza" + rand(35, ALNUM + "_-")
    out["google"] = (f"maps key {s}", [s])
    pw = rand(18)
    out["url_password"] = (f"db at https://deploy:{pw}@db.example.com:5432/app", [pw])
    s = "EMP-" + rand(6, string.digits)
    out["employee_id"] = (f"employee {s} here", [s])
    return out


SECRETS = make_secrets()
PATTERN = {"name": "employee_id", "pattern": "EMP-[0-9]{6}"}


def py_literal_split(text, sensitive=None):
    """Python source that builds TEXT from literals cut in the middle of each
    sensitive string (TEXT itself when SENSITIVE is None), so that no secret is in the code."""
    sensitive = [text] if sensitive is None else sensitive
    cuts = sorted({text.index(s) + len(s) // 2 for s in sensitive if s in text})
    pieces, last = [], 0
    for c in cuts + [len(text)]:
        pieces.append(text[last:c])
        last = c
    return "(" + " + ".join(repr(p) for p in pieces) + ")"


def code_for(text, mode, sensitive):
    def lit(t):
        return py_literal_split(t, sensitive)

    lines = [f"# {uuid.uuid4().hex}", "import sys, time",
             "B = 'before-' + 'marker'", "A = 'after-' + 'marker'",
             "print(B, flush=True)"]
    if mode == "whole":
        lines.append(f"print({lit(text)}, flush=True)")
    elif mode == "stderr":
        lines.append(f"print({lit(text)}, file=sys.stderr, flush=True)")
    elif mode == "split":
        # cut in the middle of the (last) secret: two writes, a flush and a pause between them
        cut = text.index(sensitive[-1]) + len(sensitive[-1]) // 2
        lines += [f"sys.stdout.write({lit(text[:cut])})", "sys.stdout.flush()", "time.sleep(0.3)",
                  f"sys.stdout.write({lit(text[cut:])} + ' tail\\n')", "sys.stdout.flush()"]
    elif mode == "no_newline":
        lines += ["print(A, flush=True)", f"sys.stdout.write({lit(text)})", "sys.stdout.flush()"]
        return "\n".join(lines) + "\n"
    lines.append("print(A, flush=True)")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def ws(service):
    t = gov_tenant(service, "dlp")
    _, t.member = t.person_in("member")
    put_settings(t.client, dlp_patterns=[PATTERN])
    t.raw = []        # every sensitive string printed by a test that passed (its API output was clean)
    t.current = []    # those of the running test
    return t


@pytest.fixture(autouse=True)
def _commit_raw(request):
    """Secrets of a test count for the storage check only when the test passed: a secret the
    API already leaked is reported by its own test, not again as 'stored'."""
    if "ws" not in request.fixturenames:
        yield
        return
    ws = request.getfixturevalue("ws")
    failed = request.session.testsfailed
    ws.current = []
    yield
    if request.session.testsfailed == failed:
        ws.raw.extend(ws.current)
    ws.current = []


def everything_returned(c, run_id):
    """Everything the API returns about a run, as text."""
    parts = [json.dumps(c.get_run(run_id)), json.dumps(c.list_runs()),
             json.dumps(audit_events(c, run_id=run_id)), json.dumps(c.ok("GET", f"/v1/runs/{run_id}/trace"))]
    parts.append(json.dumps(c.events(run_id, timeout=30)))
    return "\n".join(parts)


def assert_clean(text, sensitive, where, halves=True):
    for s in sensitive:
        assert s not in text, f"raw secret {s[:10]}... found in {where}"
        # nor one of its halves (a secret split across chunks must not leak piecewise)
        if halves and len(s) >= 16:
            k = len(s) // 2
            assert s[:k] not in text and s[k:] not in text, f"half of secret {s[:6]}... found in {where}"


# every format whole and split across two chunks; stderr and an unterminated last line on a few
CASES = ([(k, m) for k in SECRETS for m in ("whole", "split")] +
         [(k, m) for k in ("aws_access_key", "github", "employee_id", "private_key") for m in ("stderr", "no_newline")])


@pytest.mark.parametrize("kind,mode", CASES, ids=[f"{k}-{m}" for k, m in CASES])
def test_secret_redacted(ws, kind, mode):
    text, sensitive = SECRETS[kind]
    ws.current.extend(sensitive)
    code = code_for(text, mode, sensitive)
    for s in sensitive:
        assert s not in code
    run = ws.member.run(code, wait=False)
    live = list(ws.member.stream(run["id"], timeout=60))
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=30)
    assert done["state"] == "succeeded", done
    res = done["result"]
    out = res["stderr"] if mode == "stderr" else res["stdout"]
    assert_clean(res["stdout"] + res["stderr"], sensitive, "result.stdout/stderr")
    assert MARK.search(out), f"no [REDACTED:kind] marker in the output: {out!r}"
    if kind == "employee_id":
        assert "[REDACTED:employee_id]" in out, out
    assert "before-marker" in res["stdout"] and "after-marker" in res["stdout"], \
        f"redaction took the surrounding output too: {res['stdout']!r}"
    if mode == "split" and kind != "private_key":     # (the END line of a key block may go whole)
        assert "tail" in out, out
    n = done.get("redactions")
    assert isinstance(n, int), f"the run has no redactions count: {sorted(done)}"
    if kind == "private_key":
        assert n >= 1, done
    else:
        assert n == 1, f"one secret printed, redactions = {n}: {out!r}"
    # the live stream: no event, and not the joined chunks, carries the secret
    stream_text = "".join(d.get("data", "") for _, e, d, _ in live if e in ("stdout", "stderr"))
    assert_clean(stream_text, sensitive, "the joined stdout/stderr events")
    assert_clean(json.dumps([(e, d) for _, e, d, _ in live]), sensitive, "the event stream")
    assert MARK.search(stream_text), f"the stream lacks the marker: {stream_text!r}"
    joined_out = "".join(d.get("data", "") for _, e, d, _ in live if e == ("stderr" if mode == "stderr" else "stdout"))
    assert joined_out == out, f"the stream's output differs from the result's: {joined_out!r} vs {out!r}"
    # the audit preview is redacted too, and shows the marker
    # (the tool.call may land just after the run ends: test_governance_audit checks that race)
    deadline = time.monotonic() + 5
    while True:
        calls = audit_events(ws.member, run_id=run["id"], kind="tool.call")
        if calls or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(calls) == 1, calls
    assert_clean(json.dumps(calls), sensitive, "the audit tool.call preview")
    if mode != "stderr":
        assert "[REDACTED:" in json.dumps(calls[0]["data"]), f"the preview lacks the marker: {calls[0]}"
    # (the trace shows the input, whose literals hold halves: only whole secrets are checked there)
    assert_clean(everything_returned(ws.member, run["id"]), sensitive, "the API", halves=False)


def make_variants():
    """Other common spellings of the documented kinds."""
    out = {}
    s = rand(40, ALNUM + "/+")
    out["aws_secret_env"] = (f"export AWS_SECRET_ACCESS_KEY={s}", [s])
    s = "ASIA" + rand(16, string.ascii_uppercase + "234567")
    out["aws_temporary_key"] = (f"sts key {s}", [s])
    for label in ("OPENSSH PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY"):
        body = [rand(64, ALNUM + "+/") for _ in range(2)]
        out["pem " + label] = (f"-----BEGIN {label}-----\n" + "\n".join(body) + f"\n-----END {label}-----", body)
    s = rand(32)
    out["bearer_lowercase"] = (f"authorization: bearer {s}", [s])
    s = "xoxp-" + rand(12, string.digits) + "-" + rand(12, string.digits) + "-" + rand(32)
    out["slack_user"] = (f"slack {s}", [s])
    s = "sk-proj-" + rand(40) + "_" + rand(20)
    out["openai_project"] = (f"key {s}", [s])
    pw = rand(16)
    out["postgres_url"] = (f"DATABASE_URL=postgres://app:{pw}@db.internal:5432/main", [pw])
    pw = rand(16)
    out["http_url"] = (f"fetch http://admin:{pw}@10.0.0.5/x", [pw])
    # what `aws sts assume-role` / `aws configure export-credentials` print (JSON, one key per line)
    s = rand(40, ALNUM + "/+")
    out["aws_secret_json"] = (f'    "SecretAccessKey": "{s}",', [s])
    # a GitHub fine-grained personal access token
    s = "github_pat_" + rand(22) + "_" + rand(59)
    out["github_fine_grained"] = (f"GH_TOKEN={s}", [s])
    return out


VARIANTS = make_variants()


@pytest.mark.parametrize("kind", list(VARIANTS))
def test_secret_variants(ws, kind):
    text, sensitive = VARIANTS[kind]
    ws.current.extend(sensitive)
    code = f"print('before-marker'); print({py_literal_split(text, sensitive)}); print('after-marker')"
    done = ws.member.run(code)
    out = done["result"]["stdout"]
    assert_clean(out, sensitive, "result.stdout")
    assert MARK.search(out) and done["redactions"] >= 1, out
    assert out.startswith("before-marker\n") and out.endswith("after-marker\n"), out


@pytest.mark.parametrize("sep", [", ", ","], ids=["with-blanks", "minified"])
def test_secret_in_a_long_line_split_across_chunks(ws, sep):
    """A long single line (JSON, say) whose secret is split across two writes: the stream
    must not release the first half before it has seen the rest (with or without blanks)."""
    key = "ghp_" + rand(36)
    ws.current.append(key)
    k = len(key) // 2
    colon = ": " if sep == ", " else ":"
    code = ("import sys, time\n"
            f"sys.stdout.write('{{\"blob\"{colon}\"' + 'x' * 70000 + '\"{sep}\"token\"{colon}\"' + {key[:k]!r})\n"
            "sys.stdout.flush(); time.sleep(0.3)\n"
            f"sys.stdout.write({key[k:]!r} + '\"}}\\n'); sys.stdout.flush()\n")
    assert key not in code
    run = ws.member.run(code, wait=False)
    live = list(ws.member.stream(run["id"], timeout=60))
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=30)
    assert done["state"] == "succeeded", done
    assert_clean(done["result"]["stdout"], [key], "result.stdout")
    stream_text = "".join(d.get("data", "") for _, e, d, _ in live if e == "stdout")
    assert_clean(stream_text, [key], "the joined stdout events of a 70 KB line")
    assert stream_text == done["result"]["stdout"], "the stream's output differs from the result's"


@pytest.mark.parametrize("text", [
    "risk-assessment-summary-2026-q3.pdf",
    "node disk-pressure-monitor-7d9f8b6c5d-x2x9q is ready",
    "see https://example.com/docs/setup@latest for details",
    "AKIA alone is only a prefix",
])
def test_ordinary_output_untouched(ws, text):
    done = ws.member.run(f"print({text!r})")
    assert done["result"]["stdout"] == text + "\n", f"ordinary output was redacted: {done['result']['stdout']!r}"
    assert done["redactions"] == 0


def test_many_patterns(ws):
    """As many dlp_patterns as a workspace may save still work on a run (or are refused up front)."""
    pats = [{"name": f"p{i}", "pattern": f"ZQ{i:03d}-[0-9]{{4}}"} for i in range(80)]
    status, _, doc = ws.client.request("PUT", "/v1/settings", json={"dlp_patterns": [PATTERN] + pats})
    try:
        if status == 400:               # a cap (docs do not name one): 32 is a fair minimum
            pats = pats[:31]
            put_settings(ws.client, dlp_patterns=[PATTERN] + pats)
        else:
            assert status == 200, (status, doc)
        last = f"ZQ{len(pats) - 1:03d}-" + rand(4, string.digits)
        ws.current.append(last)
        done = ws.member.run(f"print({py_literal_split(last)})")
        assert done["state"] == "succeeded", f"{len(pats) + 1} saved dlp_patterns break runs: {done}"
        assert done["result"]["stdout"] == f"[REDACTED:p{len(pats) - 1}]\n", done["result"]
    finally:
        put_settings(ws.client, dlp_patterns=[PATTERN])


def test_all_formats_in_one_run(ws):
    texts = [t for t, _ in SECRETS.values()]
    sensitive = [s for _, ss in SECRETS.values() for s in ss]
    ws.current.extend(sensitive)
    code = "\n".join(f"print({py_literal_split(t, sensitive)})" for t in texts) + "\nprint('end-of-output')\n"
    for s in sensitive:
        assert s not in code
    done = ws.member.run(code)
    assert done["state"] == "succeeded"
    out = done["result"]["stdout"]
    assert_clean(out, sensitive, "result.stdout")
    assert out.endswith("end-of-output\n")
    assert len(MARK.findall(out)) >= len(SECRETS), out
    assert done["redactions"] >= len(SECRETS), done["redactions"]
    kinds = set(m[10:-1] for m in MARK.findall(out))
    assert len(kinds) >= 6, f"the markers do not name the kinds: {kinds}"
    assert_clean(everything_returned(ws.member, done["id"]), sensitive, "the API", halves=False)


def test_many_secrets_counted(ws):
    n = 7
    keys = ["ghp_" + rand(36) for _ in range(n)]
    ws.current.extend(keys)
    code = "\n".join(f"print('k', {py_literal_split(k)})" for k in keys) + "\n"
    done = ws.member.run(code)
    assert done["redactions"] == n, done["redactions"]
    assert_clean(done["result"]["stdout"], keys, "result.stdout")
    # two on one line
    a, b = "AKIA" + rand(16, string.ascii_uppercase), "ghp_" + rand(36)
    ws.current += [a, b]
    done = ws.member.run(f"print({py_literal_split(a)} + ' and ' + {py_literal_split(b)})")
    assert done["redactions"] == 2 and " and " in done["result"]["stdout"], done["result"]
    assert_clean(done["result"]["stdout"], [a, b], "result.stdout")


def test_clean_output_untouched(ws):
    done = ws.member.run("print('nothing secret: AKIA is a prefix; sk- too; EMP-12')")
    assert done["result"]["stdout"] == "nothing secret: AKIA is a prefix; sk- too; EMP-12\n"
    assert done["redactions"] == 0


def test_custom_pattern_is_per_workspace(service, ws):
    other = gov_tenant(service, "nodlp")
    emp = "EMP-" + rand(6, string.digits)
    code = f"print({py_literal_split(emp)})"
    done = other.client.run(code)
    assert done["result"]["stdout"] == emp + "\n", "a workspace's dlp_patterns applied to another workspace"
    assert done["redactions"] == 0
    ws.current.append("EMP-" + rand(6, string.digits))
    emp2 = ws.current[-1]
    done = ws.member.run(f"print({py_literal_split(emp2)})")
    assert done["result"]["stdout"] == "[REDACTED:employee_id]\n" and done["redactions"] == 1, done["result"]
    # a second pattern added later applies to the next run
    put_settings(ws.client, dlp_patterns=[PATTERN, {"name": "project", "pattern": "PRJ_[A-Z]{5}"}])
    prj = "PRJ_" + rand(5, string.ascii_uppercase)
    ws.current.append(prj)
    done = ws.member.run(f"print({py_literal_split(prj)}, {py_literal_split(emp2)})")
    assert done["result"]["stdout"] == "[REDACTED:project] [REDACTED:employee_id]\n", done["result"]
    put_settings(ws.client, dlp_patterns=[PATTERN])
    # the other workspace's emp was printed unredacted on purpose: it is not in ws.raw


def test_zz_unredacted_output_not_stored(service, ws):
    """The unredacted output is never stored: not anywhere under the service's
    state directory, nor in its store (the PostgreSQL database is elsewhere)."""
    assert ws.raw, "no secret was printed?"
    found = []
    for p, data in service.stored_bytes():
        for s in ws.raw:
            if s.encode() in data:
                found.append((p, s[:12] + "..."))
    assert not found, f"unredacted output stored in the state directory or the store: {found}"
