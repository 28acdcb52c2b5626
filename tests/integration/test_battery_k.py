"""Hostile battery, group K: tenant against tenant through the service.

Each case shows its ingredient working (the box really wrote what the attack
needs, with the contents it needs), then that the service is not fooled:
artifacts are addressed by what is stored, never by a display name; thread
keys of one kind of id never name another's files; a thread whose files
cannot all be staged still runs, with the rest listed as skipped."""
import hashlib
import json
import os
import uuid

from service_util import b64, gov_tenant, ledger_by_run, service, usage  # noqa: F401


def tid():
    return "k-" + uuid.uuid4().hex[:16]


def sha(data):
    return hashlib.sha256(data).hexdigest()


def listing_py(root=b"/out"):
    """Python that prints, as its last line, {hex name: content} of every file under ROOT."""
    return f'''
import json, os
seen = {{}}
for d, _, fs in os.walk({root!r}):
    for f in fs:
        p = os.path.join(d, f)
        seen[os.path.relpath(p, {root!r}).hex()] = open(p, "rb").read().decode("latin-1")
print(json.dumps(seen))
'''


def last_json(run):
    return json.loads(run["result"]["stdout"].strip().splitlines()[-1])


def skipped_by_path(run):
    return {s["path"]: s["why"] for s in run["skipped"]}


# ------------------------------------------------------------ K1, K2


def test_k1_names_one_lossy_reading_apart_do_not_poison_the_blob_store(service):
    """K1: /out/\\x80 (content T) and /out/\\xef\\xbf\\xbd (content P) read alike once
    converted lossily to UTF-8; the service once renamed P into blobs/sha256(T), and
    every later run of any tenant writing T got P. K2: the same mismatch ended the
    run as `error`, refunded: free compute."""
    a, b = gov_tenant(service, "ka"), gov_tenant(service, "kb")
    T = b"tenant B's quarterly figures " + uuid.uuid4().hex.encode() + b"\n"
    P = b"tenant A's poison " + uuid.uuid4().hex.encode() + b"\n"
    code = (f"open(b'/out/\\x80', 'wb').write({T!r})\n"
            f"open(b'/out/\\xef\\xbf\\xbd', 'wb').write({P!r})\n" + listing_py())
    ra = a.client.run(code)
    # the ingredient: two distinct files, with the two contents, really in /out
    seen = last_json(ra)
    assert seen == {"80": T.decode("latin-1"), "efbfbd": P.decode("latin-1")}, f"the box's /out: {seen}"

    # tenant B writes T: its artifact is T, downloaded as T
    rb = b.client.run(f"open('/out/figures.txt', 'wb').write({T!r})\n")
    assert rb["state"] == "succeeded", rb
    [art] = rb["artifacts"]
    assert art["sha256"] == sha(T) and art["size"] == len(T), art
    _, got = b.client.content_bytes(art["id"])
    assert got == T, f"tenant B downloaded another tenant's bytes for its own file: {got!r}"

    # K2: the run ended as its script did, and was charged
    assert ra["state"] == "succeeded", f"A's run: {ra['state']} {ra.get('error')}"
    led = ledger_by_run(usage(a.client)["ledger"]).get(ra["id"])
    assert led == {"charge": [2], "refund": []}, f"A's run's ledger: {led}"
    # the name that is not UTF-8 is skipped with its reason, shown escaped, never kept
    sk = skipped_by_path(ra)
    assert "\\x80" in sk and "UTF-8" in sk["\\x80"], ra["skipped"]
    arts = {x["path"]: x for x in ra["artifacts"]}
    assert list(arts) == ["\ufffd"], arts
    assert arts["\ufffd"]["sha256"] == sha(P) and a.client.content_bytes(arts["\ufffd"]["id"])[1] == P, arts
    assert all(x["sha256"] != sha(T) for x in ra["artifacts"]), ra["artifacts"]


def test_k1_a_planted_blob_is_not_served(service):
    """A blob that is in the store before its owner writes it (planted by an earlier
    bug, or corrupted) is checked against its name before it is shared: the run
    writing that content gets its own bytes back."""
    t = gov_tenant(service, "kp")
    T = b"the real content " + uuid.uuid4().hex.encode()
    h = sha(T)
    blob = service.state / "blobs" / h[:2] / h
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(b"planted " + uuid.uuid4().hex.encode())
    r = t.client.run(f"open('/out/real.txt', 'wb').write({T!r})\n")
    assert r["state"] == "succeeded", r
    [art] = r["artifacts"]
    assert art["sha256"] == h, art
    _, got = t.client.content_bytes(art["id"])
    assert got == T, f"the planted blob was served: {got!r}"
    assert blob.read_bytes() == T


def test_k1_names_with_controls_are_skipped_shown_escaped(service):
    """A name with a control or bidi-override character (a forged line in a listing,
    a terminal escape in a log) is not collected; its display is escaped, so it
    cannot read as another name; a backslash in a kept name stays as it is."""
    t = gov_tenant(service, "kc")
    names = [b"a\nb", b"esc\x1b[2J", "rev\u202etxt.exe".encode(), b"back\\slash", b"plain.txt"]
    code = "".join(f"open(b'/out/' + {n!r}, 'wb').write({n!r})\n" for n in names) + listing_py()
    r = t.client.run(code)
    assert sorted(last_json(r)) == sorted(n.hex() for n in names), last_json(r)
    assert r["state"] == "succeeded", r
    assert sorted(a["path"] for a in r["artifacts"]) == ["back\\slash", "plain.txt"], r["artifacts"]
    sk = skipped_by_path(r)
    assert {"a\\x0ab", "esc\\x1b[2J", "rev\\xe2\\x80\\xaetxt.exe"} <= set(sk), r["skipped"]
    assert all("control" in sk[k] for k in ("a\\x0ab", "esc\\x1b[2J", "rev\\xe2\\x80\\xaetxt.exe")), sk
