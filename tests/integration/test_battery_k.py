"""Hostile battery, group K: tenant against tenant through the service.

Each case shows its ingredient working (the box really wrote what the attack
needs, with the contents it needs), then that the service is not fooled:
artifacts are addressed by what is stored, never by a display name; thread
keys of one kind of id never name another's files; a thread whose files
cannot all be staged still runs, with the rest listed as skipped."""
import hashlib
import json
import os
import re
import uuid

from service_util import b64, gov_tenant, ledger_by_run, service, services, usage  # noqa: F401


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


def test_k1_names_alike_after_normalisation_stay_apart(service):
    """Names that Unicode normalisation or case folding would make one (NFC and
    NFD, A and a) are different files: each is kept, downloaded and staged as
    its own bytes. (A regression guard: the base binary holds this too.)"""
    t = tid()
    names = ["\u00e9.txt", "e\u0301.txt", "A.txt", "a.txt"]
    files = {n: f"content of {n.encode().hex()} {uuid.uuid4().hex}".encode() for n in names}
    code = "".join(f"open({('/out/' + n)!r}, 'wb').write({d!r})\n" for n, d in files.items()) + listing_py()
    r = service.run(code, thread_id=t)
    assert last_json(r) == {n.encode().hex(): d.decode() for n, d in files.items()}, last_json(r)
    arts = {a["path"]: a for a in r["artifacts"]}
    assert sorted(arts) == sorted(names), arts
    for n, d in files.items():
        assert arts[n]["sha256"] == sha(d) and service.content_bytes(arts[n]["id"])[1] == d, (n, arts[n])
    r2 = service.run(listing_py(b"/work/documents"), thread_id=t)
    assert r2["state"] == "succeeded", r2
    assert last_json(r2) == {n.encode().hex(): d.decode() for n, d in files.items()}, last_json(r2)


# ------------------------------------------------------------ K3


def test_k3_a_thread_id_shaped_like_a_run_id_gets_nothing_of_that_run(service):
    """Thread keys were the thread id, or the run id for a run without a thread:
    a thread named like a run id shared that run's files."""
    secret = b"run-only secret " + uuid.uuid4().hex.encode()
    r = service.run(f"open('/out/secret.txt', 'wb').write({secret!r})\n")
    assert r["state"] == "succeeded" and [a["path"] for a in r["artifacts"]] == ["secret.txt"], r
    # the ingredient: a run id is a valid thread id
    r2 = service.run("import json, os\nd = '/work/documents'\n"
                     "print(json.dumps(sorted(os.listdir(d)) if os.path.isdir(d) else []))\n"
                     "open('/out/secret.txt', 'w').write('mine')\n", thread_id=r["id"])
    assert r2["state"] == "succeeded" and r2["thread_id"] == r["id"], r2
    assert last_json(r2) == [], f"the thread named like a run saw that run's files: {last_json(r2)}"
    [a2] = r2["artifacts"]
    assert a2["version"] == 1, f"the thread's file became a version of the run's: {a2}"
    # and the thread's file did not become the run's newest either
    listed = service.ok("GET", f"/v1/threads/{r['id']}/artifacts")["artifacts"]
    assert [(x["path"], x["run_id"]) for x in listed] == [("secret.txt", r2["id"])], listed


# ------------------------------------------------------------ K4


def test_k4_a_file_and_a_directory_of_one_name_do_not_stop_the_thread(service):
    """A thread holding `x` (a file, from one run) and `x/y` (from a later run)
    made every later run of the thread fail at start."""
    t = tid()
    r1 = service.run("open('/out/x', 'w').write('file x')\n", thread_id=t)
    r2 = service.run("import os\nos.makedirs('/out/x')\nopen('/out/x/y', 'w').write('file x/y')\n", thread_id=t)
    assert r1["state"] == r2["state"] == "succeeded", (r1, r2)
    # the ingredient: both are the thread's latest
    latest = service.ok("GET", f"/v1/threads/{t}/artifacts")["artifacts"]
    assert sorted(a["path"] for a in latest) == ["x", "x/y"], latest
    r3 = service.run(listing_py(b"/work/documents"), thread_id=t)
    assert r3["state"] == "succeeded", f"the thread's next run: {r3['state']} {r3.get('error')}"
    # the newer (x/y) is staged; the older is listed with the reason
    assert last_json(r3) == {b"x/y".hex(): "file x/y"}, last_json(r3)
    sk = skipped_by_path(r3)
    assert "/work/documents/x" in sk and "not staged" in sk["/work/documents/x"], r3["skipped"]


def test_k4_a_path_deeper_than_the_stage_depth_does_not_stop_the_thread(service):
    """/out takes 16 levels of directories; /work/documents is one level of what the
    box stages, so such a file made every later run of its thread fail at start."""
    t = tid()
    deep = "/".join(f"d{i}" for i in range(1, 17)) + "/f.txt"
    r1 = service.run(f"import os\nos.makedirs(os.path.dirname('/out/{deep}'))\n"
                     f"open('/out/{deep}', 'w').write('deep')\nopen('/out/ok.txt', 'w').write('ok')\n", thread_id=t)
    assert r1["state"] == "succeeded", r1
    assert sorted(a["path"] for a in r1["artifacts"]) == sorted([deep, "ok.txt"]), (r1["artifacts"], r1["skipped"])
    r2 = service.run(listing_py(b"/work/documents"), thread_id=t)
    assert r2["state"] == "succeeded", f"the thread's next run: {r2['state']} {r2.get('error')}"
    assert last_json(r2) == {b"ok.txt".hex(): "ok"}, last_json(r2)
    sk = skipped_by_path(r2)
    assert "/work/documents/" + deep in sk and "deep" in sk["/work/documents/" + deep], r2["skipped"]


def test_k4_more_documents_than_work_holds_do_not_stop_the_thread(service):
    """Twelve runs of 100 files each (the per-run cap) give a thread 1200 files, more
    than the box stages in all (1000): every later run of the thread failed at start.
    The newest are staged; the first of the rest are listed, then counted."""
    t = tid()
    for k in range(12):
        r = service.run(f"for i in range(100):\n    open(f'/out/f{k:02}-{{i:03}}', 'w').write('{k}')\n", thread_id=t)
        assert r["state"] == "succeeded" and len(r["artifacts"]) == 100, (
            f"run {k} of the thread: {r['state']} {r.get('error')}", len(r["artifacts"]), r["skipped"][:3])
    r = service.run("import json, os\nprint(json.dumps(sorted(os.listdir('/work/documents'))))\n", thread_id=t)
    assert r["state"] == "succeeded", f"the thread's next run: {r['state']} {r.get('error')}"
    staged = last_json(r)
    sk = skipped_by_path(r)
    summary = sk.pop("/work/documents/", "")
    listed = {p: w for p, w in sk.items() if p.startswith("/work/documents/")}
    m = re.search(r"(\d+) more of the thread's files", summary)
    assert m and len(listed) == 100, (summary, len(listed))
    assert staged and len(staged) + len(listed) + int(m.group(1)) == 1200, (len(staged), len(listed), summary)
    assert all("exceed" in w for w in listed.values()), listed
    # the newest are the ones staged
    assert "f11-099" in staged and "f00-000" not in staged, (staged[-3:], staged[:3])
    assert not set(staged) & {p[len("/work/documents/"):] for p in listed}, "staged and listed as skipped"


def test_k1_a_blob_poisoned_before_the_upgrade_is_not_served(services):
    """A store from before ingest verified content can hold a blob whose bytes
    are not its name's (the lossy-name collision put one tenant's file under
    another's hash). At its first start the service re-hashes the store once
    and removes such a blob: its artifact then reads as missing, never as
    the other tenant's bytes."""
    svc = services.start("kupgrade")
    t = gov_tenant(svc, "ku")
    T = b"the owner's content " + uuid.uuid4().hex.encode()
    r = t.client.run(f"open('/out/owned.txt', 'wb').write({T!r})\n")
    [art] = r["artifacts"]
    blob = svc.state / "blobs" / art["sha256"][:2] / art["sha256"]
    svc.stop()
    # what an old store may hold: other bytes of the same size under the name,
    # and no mark that the store was verified
    poison = b"P" * len(T)
    blob.write_bytes(poison)
    (svc.state / "blobs" / ".verified-1").unlink(missing_ok=True)
    svc.start()
    status, _, doc = t.client.request("GET", f"/v1/artifacts/{art['id']}/content")
    assert status >= 400 and "missing" in json.dumps(doc), (status, doc)
    assert not blob.exists()
    assert "blobs.removed" in svc.log_path.read_text()
    # and a later run writing the content stores it again, verified
    r2 = t.client.run(f"open('/out/owned.txt', 'wb').write({T!r})\n")
    _, again = t.client.content_bytes(r2["artifacts"][0]["id"])
    assert again == T
