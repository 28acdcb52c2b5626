"""`airlock serve`: threads, artifact versions and downloads, staging of a
thread's artifacts into /work/documents, previews (docs/api.md)."""
import base64
import hashlib
import json
import os
import struct
import uuid
import zlib

from service_util import ARTIFACT_FIELDS, assert_error, b64, parse_time, service  # noqa: F401


def tiny_png():
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    raw = b"\x00\xff\x00\x00"
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


PNG = tiny_png()


def tid():
    return "t-" + uuid.uuid4().hex[:16]


def write_files(files):
    """Python code that writes {path under /out: bytes}."""
    lines = ["import base64, os"]
    for path, data in files.items():
        lines.append(f"os.makedirs(os.path.dirname('/out/{path}'), exist_ok=True)")
        lines.append(f"open('/out/{path}', 'wb').write(base64.b64decode('{b64(data)}'))")
    return "\n".join(lines) + "\n"


def by_path(arts):
    return {a["path"]: a for a in arts}


def check_artifact(svc, art, data, ctype, thread, run_id, version):
    assert ARTIFACT_FIELDS <= art.keys(), f"artifact lacks {ARTIFACT_FIELDS - art.keys()}: {art}"
    assert art["id"].startswith("art_")
    assert art["thread_id"] == thread and art["run_id"] == run_id and art["version"] == version, art
    assert art["size"] == len(data) and art["sha256"] == hashlib.sha256(data).hexdigest(), art
    assert art["content_type"].split(";")[0].strip() == ctype, art
    parse_time(art["created_at"])
    assert svc.ok("GET", f"/v1/artifacts/{art['id']}") == art
    hdrs, raw = svc.content_bytes(art["id"])
    assert raw == data, f"content of {art['path']} v{version}: {raw[:100]!r}"
    assert hdrs.get("content-type", "").split(";")[0].strip() == ctype, hdrs


def test_versions_downloads_and_staging(service):
    t = tid()
    v1 = {"report.txt": b"version one\n", "sub/dir/data.csv": b"a,b\n1,2\n", "chart.png": PNG,
          "blob.bin": os.urandom(3000), "meta.json": b'{"k": 1}'}
    r1 = service.run(write_files(v1), thread_id=t)
    assert r1["state"] == "succeeded" and r1["thread_id"] == t, r1
    a1 = by_path(r1["artifacts"])
    assert sorted(a1) == sorted(v1), sorted(a1)
    types = {"report.txt": "text/plain", "sub/dir/data.csv": "text/csv", "chart.png": "image/png",
             "blob.bin": "application/octet-stream", "meta.json": "application/json"}
    for path, data in v1.items():
        check_artifact(service, a1[path], data, types[path], t, r1["id"], 1)

    # the same path again: version 2; the run's /out started empty
    r2 = service.run("import os\nprint(sorted(os.listdir('/out')))\n" + write_files({"report.txt": b"version two!\n"}),
                     thread_id=t)
    assert r2["state"] == "succeeded", r2
    assert r2["result"]["stdout"] == "[]\n", f"/out did not start empty: {r2['result']['stdout']!r}"
    a2 = by_path(r2["artifacts"])
    assert list(a2) == ["report.txt"]
    check_artifact(service, a2["report.txt"], b"version two!\n", "text/plain", t, r2["id"], 2)
    # version 1 is still downloadable with its own bytes
    check_artifact(service, a1["report.txt"], b"version one\n", "text/plain", t, r1["id"], 1)

    latest = service.ok("GET", f"/v1/threads/{t}/artifacts")["artifacts"]
    lp = by_path(latest)
    assert len(latest) == len(lp) == len(v1), [(a["path"], a["version"]) for a in latest]
    assert lp["report.txt"]["id"] == a2["report.txt"]["id"] and lp["report.txt"]["version"] == 2
    assert lp["chart.png"]["id"] == a1["chart.png"]["id"]
    every = service.ok("GET", f"/v1/threads/{t}/artifacts?all=true")["artifacts"]
    assert sorted((a["path"], a["version"]) for a in every) == sorted(
        [(p, 1) for p in v1] + [("report.txt", 2)])

    # a third run in the thread gets the latest of each path in /work/documents
    code = ("import os, hashlib\n"
            "for root, dirs, files in os.walk('/work/documents'):\n"
            "    for f in files:\n"
            "        p = os.path.join(root, f)\n"
            "        print(os.path.relpath(p, '/work/documents'), hashlib.sha256(open(p,'rb').read()).hexdigest())\n"
            "print('out', sorted(os.listdir('/out')))\n")
    r3 = service.run(code, thread_id=t)
    assert r3["state"] == "succeeded", r3
    lines = r3["result"]["stdout"].splitlines()
    assert lines[-1] == "out []", lines
    staged = dict(line.split() for line in lines[:-1])
    want = {p: hashlib.sha256(d).hexdigest() for p, d in v1.items()}
    want["report.txt"] = hashlib.sha256(b"version two!\n").hexdigest()
    assert staged == want, f"/work/documents held {staged}"
    # staged files are inputs, not new artifacts
    assert r3["artifacts"] == []
    assert len(service.ok("GET", f"/v1/threads/{t}/artifacts?all=true")["artifacts"]) == len(v1) + 1

    # thread filter on the run list
    listed = service.list_runs(thread_id=t)
    assert [r["id"] for r in listed] == [r3["id"], r2["id"], r1["id"]]


def test_other_thread_sees_nothing(service):
    t = tid()
    service.run(write_files({"secret.txt": b"mine"}), thread_id=t)
    r = service.run("import os\nprint(os.path.isdir('/work/documents') and os.listdir('/work/documents'))",
                    thread_id=tid())
    assert r["result"]["stdout"].strip() in ("False", "[]"), r["result"]
    r = service.run("import os\nprint(os.path.isdir('/work/documents') and os.listdir('/work/documents'))")
    assert r["result"]["stdout"].strip() in ("False", "[]"), r["result"]


def test_unknown_thread_lists_empty(service):
    status, _, doc = service.get(f"/v1/threads/{tid()}/artifacts")
    assert status in (200, 404), (status, doc)
    if status == 200:
        assert doc == {"artifacts": []} or doc.get("artifacts") == []
    else:
        assert_error(status, doc, "not_found")


def test_bad_thread_id_in_path(service):
    status, _, doc = service.get("/v1/threads/" + "x" * 65 + "/artifacts")
    assert status in (400, 404), (status, doc)
    assert_error(status, doc, "bad_request" if status == 400 else "not_found")


def test_run_without_thread_and_explicit_artifact_refs(service):
    r1 = service.run(write_files({"notes/n.txt": b"first"}))
    a = r1["artifacts"]
    assert len(a) == 1 and a[0]["thread_id"] is None and a[0]["version"] == 1 and a[0]["path"] == "notes/n.txt"
    check_artifact(service, a[0], b"first", "text/plain", None, r1["id"], 1)
    # the same path in another thread-less run: a separate artifact of that run alone
    r2 = service.run(write_files({"notes/n.txt": b"second"}))
    b = r2["artifacts"]
    assert len(b) == 1 and b[0]["id"] != a[0]["id"] and b[0]["version"] == 1
    check_artifact(service, b[0], b"second", "text/plain", None, r2["id"], 1)
    # explicit references land in /work/documents (same relative path)
    r3 = service.run("print(open('/work/documents/notes/n.txt').read())", artifacts=[a[0]["id"]])
    assert r3["state"] == "succeeded", r3["result"]
    assert r3["result"]["stdout"] == "first\n"
    # an older version of a thread artifact by reference, into a run of another thread
    t = tid()
    x1 = service.run(write_files({"x.txt": b"x-v1"}), thread_id=t)["artifacts"][0]
    service.run(write_files({"x.txt": b"x-v2"}), thread_id=t)
    r4 = service.run("print(open('/work/documents/x.txt').read())", artifacts=[x1["id"]], thread_id=tid())
    assert r4["result"]["stdout"] == "x-v1\n", r4["result"]


def test_previews_returned_not_published(service):
    t = tid()
    code = write_files({"preview/chart.png": PNG, "keep.txt": b"kept"})
    r = service.run(code, thread_id=t)
    assert r["state"] == "succeeded", r
    assert [a["path"] for a in r["artifacts"]] == ["keep.txt"], r["artifacts"]
    assert len(r["previews"]) == 1, r["previews"]
    p = r["previews"][0]
    assert p["path"] == "preview/chart.png" and p["content_type"] == "image/png", p
    assert p["size"] == len(PNG) and p["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert base64.b64decode(p["content_base64"]) == PNG
    # kept with the run
    again = service.get_run(r["id"])
    assert again["previews"] == r["previews"]
    every = service.ok("GET", f"/v1/threads/{t}/artifacts?all=true")["artifacts"]
    assert [a["path"] for a in every] == ["keep.txt"]
    # and not staged into the next run of the thread
    r2 = service.run("import os\nfor root, d, f in os.walk('/work/documents'):\n    print(sorted(f))", thread_id=t)
    assert "chart.png" not in r2["result"]["stdout"] and "keep.txt" in r2["result"]["stdout"]


def test_skipped_files_reported(service):
    code = ("import os\nos.symlink('/etc/passwd', '/out/link')\nopen('/out/ok.txt', 'w').write('ok')\n")
    r = service.run(code)
    assert [a["path"] for a in r["artifacts"]] == ["ok.txt"]
    assert any(s["path"] == "link" and s["why"] for s in r["skipped"]), r["skipped"]


def test_content_is_deduplicated_on_disk(service):
    data = ("dedup-" + uuid.uuid4().hex).encode() * 100
    sha = hashlib.sha256(data).hexdigest()
    r1 = service.run(write_files({"a.txt": data}), thread_id=tid())
    r2 = service.run(write_files({"b/c.txt": data}), thread_id=tid())
    ids = {r1["artifacts"][0]["id"], r2["artifacts"][0]["id"]}
    assert len(ids) == 2
    for i in ids:
        assert service.content_bytes(i)[1] == data
    holders = []
    for root, _, files in os.walk(service.state):
        for f in files:
            p = os.path.join(root, f)
            try:
                if os.path.getsize(p) == len(data) and open(p, "rb").read() == data:
                    holders.append(p)
            except OSError:
                pass
    assert len(holders) == 1, f"the same content stored {len(holders)} times: {holders}"
    assert sha in holders[0], f"not content-addressed by sha256: {holders[0]}"


def test_artifact_json_bytes_exact(service):
    # a JSON artifact comes back byte for byte (not re-encoded)
    data = b'{ "b":2,\n  "a": [1, 2] }\n'
    r = service.run(write_files({"x.json": data}))
    hdrs, raw = service.content_bytes(r["artifacts"][0]["id"])
    assert raw == data and json.loads(raw) == {"b": 2, "a": [1, 2]}
