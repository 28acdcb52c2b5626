"""The E2B SDK (npm e2b 2.51.0), unchanged, against airlock's E2B-compatible
control plane and sandbox files (tests/e2e/e2b_control.test.mjs), and what
the SDK cannot show: hostile names and links left in a sandbox's home,
the bytes cap, a malformed upload, the sandbox plane's admission."""
import json
import os
import re
import time
import uuid

from node_util import node_test, npm_ci
from service_util import parse_time, service  # noqa: F401


def test_e2b_sdk(service):
    npm_ci()
    other = service.new_tenant("e2b-other")
    node_test("e2b_control.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key,
                                        "AIRLOCK_OTHER_KEY": other.key}, expect=10)


# ------------------------------------------------------------ what the SDK cannot show

def create(service, **body):
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", **body},
                                     headers={"X-API-KEY": service.key})
    assert status == 201, (status, doc)
    return doc["sandboxID"], doc["envdAccessToken"]


def plane(service, sid, token, method, path, body=None, headers=None, json_body=None):
    """A request of the sandbox plane (E2b-Sandbox-Id), without an API key."""
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", **({"X-Access-Token": token} if token else {}),
         **(headers or {})}
    return service.request(method, path, key=None, body=body, json=json_body, headers=h)


def rpc(service, sid, token, method, body):
    return plane(service, sid, token, "POST", f"/filesystem.Filesystem/{method}", json_body=body,
                 headers={"Connect-Protocol-Version": "1"})


def multipart(parts, boundary="airlockboundary"):
    out = b""
    for name, filename, data in parts:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def home(service, sid):
    return service.state / "sandboxes" / sid / "home"


def test_links_and_hostile_names_left_in_home_are_never_followed(service, tmp_path):
    """What a box may leave in /work (collected back into home/): a link to a
    host file, a link to a host directory, a name with a control character.
    Nothing reads, lists, writes or removes through them."""
    sid, token = create(service)
    h = home(service, sid)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    os.symlink(outside / "secret", h / "link")
    os.symlink(outside, h / "ldir")
    (h / "bad\x01name").write_text("x")
    (h / "ok.txt").write_text("fine")
    status, _, doc = plane(service, sid, token, "GET", "/files?path=/home/user/link")
    assert status == 400 and "symbolic link" in doc["message"], (status, doc)
    status, _, doc = plane(service, sid, token, "GET", "/files?path=/home/user/ldir/secret")
    assert status == 400 and b"host secret" not in json.dumps(doc).encode(), (status, doc)
    body, hdrs = multipart([("file", "/home/user/ldir/planted", b"planted")])
    status, _, doc = plane(service, sid, token, "POST", "/files", body=body, headers=hdrs)
    assert status == 400, (status, doc)
    assert not (outside / "planted").exists()
    # written over, a link is replaced, never written through
    body, hdrs = multipart([("file", "/home/user/link", b"new")])
    status, _, doc = plane(service, sid, token, "POST", "/files?path=/home/user/link", body=body, headers=hdrs)
    assert status == 200, (status, doc)
    assert (outside / "secret").read_text() == "host secret"
    assert not (h / "link").is_symlink() and (h / "link").read_text() == "new"
    status, _, doc = rpc(service, sid, token, "ListDir", {"path": "/home/user", "depth": 3})
    assert status == 200, (status, doc)
    names = {e["name"]: e["type"] for e in doc["entries"]}
    assert names == {"ldir": "FILE_TYPE_SYMLINK", "link": "FILE_TYPE_FILE", "ok.txt": "FILE_TYPE_FILE"}, names
    status, _, doc = rpc(service, sid, token, "Stat", {"path": "/home/user/ldir/secret"})
    assert status == 400 and doc["code"] == "invalid_argument", (status, doc)
    status, _, doc = rpc(service, sid, token, "MakeDir", {"path": "/home/user/ldir/sub"})
    assert status == 400, (status, doc)
    status, _, doc = rpc(service, sid, token, "Move", {"source": "/home/user/ok.txt", "destination": "/home/user/ldir/ok"})
    assert status == 400, (status, doc)
    status, _, doc = rpc(service, sid, token, "Remove", {"path": "/home/user/ldir"})
    assert status == 200, (status, doc)
    assert (outside / "secret").read_text() == "host secret" and not os.path.lexists(h / "ldir")
    for bad in ["/home/user/a/../../x", "/proc/self/environ", "/home/userx", "/out/\x1b[31m"]:
        status, _, doc = rpc(service, sid, token, "Stat", {"path": bad})
        assert status == 400 and doc["code"] == "invalid_argument", (bad, status, doc)
    # the root emptied: what no path could name goes too; the root stays
    assert os.path.lexists(h / "bad\x01name")
    status, _, doc = rpc(service, sid, token, "Remove", {"path": "/home/user"})
    assert status == 200, (status, doc)
    assert h.is_dir() and list(h.iterdir()) == []
    assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    assert not (service.state / "sandboxes" / sid).exists()
    assert (outside / "secret").read_text() == "host secret"


def test_uploads_are_bounded_and_malformed_ones_refused(service):
    sid, token = create(service)
    # a multipart body with no file part, a broken one, another content type
    body, hdrs = multipart([("other", "x", b"1")])
    assert plane(service, sid, token, "POST", "/files?path=a", body=body, headers=hdrs)[0] == 400
    status, _, doc = plane(service, sid, token, "POST", "/files?path=a", body=b"--nope\r\ngarbage",
                           headers={"Content-Type": "multipart/form-data; boundary=airlockboundary"})
    assert status == 400, (status, doc)
    status, _, doc = plane(service, sid, token, "POST", "/files?path=a", body=b"raw",
                           headers={"Content-Type": "application/octet-stream"})
    assert status == 400 and "multipart" in doc["message"], (status, doc)
    body, hdrs = multipart([("file", f"/home/user/f{i}", b"x") for i in range(65)])
    status, _, doc = plane(service, sid, token, "POST", "/files", body=body, headers=hdrs)
    assert status == 400 and "at most" in doc["message"], (status, doc)
    # the sandbox's bytes: a file as large as the cap leaves no room
    with open(home(service, sid) / "big", "wb") as f:
        f.truncate(64 << 20)
    body, hdrs = multipart([("file", "/out/more", b"y" * 1024)])
    status, _, doc = plane(service, sid, token, "POST", "/files?path=/out/more", body=body, headers=hdrs)
    assert status == 507 and "MiB" in doc["message"], (status, doc)
    os.unlink(home(service, sid) / "big")
    assert plane(service, sid, token, "POST", "/files?path=/out/more", body=body, headers=hdrs)[0] == 200
    service.request("DELETE", f"/sandboxes/{sid}")


def test_the_sandbox_plane_admits_only_its_token_and_a_live_sandbox(service):
    sid, token = create(service)
    assert plane(service, sid, token, "GET", "/health")[0] == 204
    status, _, doc = plane(service, sid, None, "GET", "/health")
    assert status == 401 and doc["code"] == 401, (status, doc)
    status, _, doc = rpc(service, sid, "0" * 64, "Stat", {"path": "/home/user"})
    assert status == 401 and doc["code"] == "unauthenticated", (status, doc)
    # an API key is not the sandbox's token
    status, _, _ = plane(service, sid, service.key, "GET", "/health")
    assert status == 401
    status, _, doc = plane(service, "sbx_00000000000000000000", token, "GET", "/health")
    assert status == 502, (status, doc)
    # WatchDir is a server stream: its refusal is the end-stream frame (what the SDK reads)
    status, _, doc = rpc(service, sid, token, "WatchDir", {"path": "/home/user"})
    assert status == 200 and doc[:1] == b"\x02" and b'"unimplemented"' in doc, (status, doc)
    status, _, doc = rpc(service, sid, token, "CreateWatcher", {"path": "/home/user"})
    assert status == 501 and doc["code"] == "unimplemented", (status, doc)
    status, _, doc = plane(service, sid, token, "GET", "/no/such")
    assert status == 404 and doc["code"] == 404, (status, doc)
    # Connect's own check: JSON only
    status, _, doc = plane(service, sid, token, "POST", "/filesystem.Filesystem/Stat", body=b"\x00",
                           headers={"Content-Type": "application/proto"})
    assert status == 400 and doc["code"] == "invalid_argument", (status, doc)
    # a second token from connect is the same token (it is derived, not stored)
    status, _, doc = service.request("POST", f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
    assert status == 200 and doc["envdAccessToken"] == token, (status, doc)
    # the service's secret replaced: a sandbox's token stays until connect
    # (with the API key) hands out a new one, derived from the new secret
    key_file = service.state / "sandbox-token.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.stat().st_size == 32
    key_file.unlink()
    assert plane(service, sid, token, "GET", "/health")[0] == 204
    status, _, doc = service.request("POST", f"/v2/sandboxes/{sid}/connect", json={})
    assert status == 200 and doc["envdAccessToken"] != token, (status, doc)
    assert plane(service, sid, doc["envdAccessToken"], "GET", "/health")[0] == 204
    assert plane(service, sid, token, "GET", "/health")[0] == 401
    token = doc["envdAccessToken"]
    assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    status, _, doc = plane(service, sid, token, "GET", "/health")
    assert status == 502, (status, doc)


def test_a_revoked_key_ends_its_sandboxes_access(service):
    t = service.new_tenant(f"e2b-revoke-{uuid.uuid4().hex[:6]}")
    sid, token = create(t.client)
    assert plane(service, sid, token, "GET", "/health")[0] == 204
    kid = next(m.group(1) for m in (re.search(r"\bid=(key_[A-Za-z0-9]+)\b.*\bkey=([A-Za-z0-9_]+)\.\.\.", line)
                                    for line in service.admin("list").splitlines())
               if m and t.key.startswith(m.group(2)))
    service.admin("key", "revoke", kid)
    status, _, doc = plane(service, sid, token, "GET", "/health")
    assert status == 502 and "revoked" in doc["message"], (status, doc)


def test_control_plane_shapes_limits_and_audit(service):
    # E2B's shape of error, with a Bearer key as well as X-API-KEY
    status, _, doc = service.request("GET", "/sandboxes/sbx_00000000000000000000")
    assert status == 404 and doc["code"] == 404 and doc["message"], (status, doc)
    status, _, doc = service.request("GET", "/sandboxes/sbx_x", key=None)
    assert status == 401 and doc["code"] == 401, (status, doc)
    for path in ["/templates", "/v2/sandboxes/sbx_x/logs", "/sandboxes/sbx_x/metrics", "/snapshots"]:
        status, _, doc = service.request("GET", path)
        assert status == 501 and doc["code"] == 501, (path, status, doc)
    status, _, doc = service.request("GET", "/v2/sandboxes", query={"limit": "101"})
    assert status == 400, (status, doc)
    status, _, doc = service.request("GET", "/v2/sandboxes", query={"nextToken": "nope"})
    assert status == 400, (status, doc)
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", "metadata": {"k": 1}})
    assert status == 400 and "metadata" in doc["message"], (status, doc)
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base",
                                                                    "metadata": {f"k{i}": "v" for i in range(33)}})
    assert status == 400, (status, doc)
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", "volumeMounts": [{"name": "v", "path": "/v"}]})
    assert status == 400 and "volumeMounts" in doc["message"], (status, doc)
    status, hdrs, _ = service.request("GET", "/v2/sandboxes", query={"limit": "1"})
    assert status == 200
    # audited, via e2b: create, timeout, kill
    sid, _ = create(service)
    assert service.request("POST", f"/sandboxes/{sid}/timeout", json={"timeout": 30})[0] == 204
    assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    evs = [e for e in service.ok("GET", "/v1/audit", query={"limit": "200"})["events"]
           if (e.get("data") or {}).get("sandbox_id") == sid]
    kinds = sorted(e["kind"] for e in evs)
    assert kinds == ["sandbox.create", "sandbox.kill", "sandbox.timeout"], evs
    assert all(e["data"]["via"] == "e2b" for e in evs), evs


def test_live_sandboxes_are_capped_per_workspace(service):
    t = service.new_tenant(f"e2b-cap-{uuid.uuid4().hex[:6]}")
    # five people, twenty each (a person's own share: test_battery_p_e2b.py p2)
    people = [t.client] + [service.with_key(service.new_person(t.workspace, f"e2b-cap-{i}")[1]) for i in range(5)]
    made = [create(people[i // 20])[0] for i in range(100)]
    status, _, doc = people[5].request("POST", "/v2/sandboxes", json={"templateID": "base"},
                                       headers={"X-API-KEY": people[5].key})
    assert status == 429 and doc["code"] == 429 and "100" in doc["message"], (status, doc)
    # the list pages through all of them, 100 at most a page
    status, hdrs, page = t.client.request("GET", "/v2/sandboxes")
    assert status == 200 and len(page) == 100 and "x-next-token" not in hdrs, (status, len(page), hdrs)
    status, hdrs, page = t.client.request("GET", "/v2/sandboxes", query={"limit": "60"})
    assert len(page) == 60 and hdrs.get("x-next-token"), hdrs
    status, hdrs2, rest = t.client.request("GET", "/v2/sandboxes", query={"limit": "60", "nextToken": hdrs["x-next-token"]})
    assert len(rest) == 40 and "x-next-token" not in hdrs2
    assert {s["sandboxID"] for s in page + rest} == set(made)
    assert page[0]["sandboxID"] == made[-1]
    # oldest first, paged the same way
    status, hdrs, page = t.client.request("GET", "/v2/sandboxes", query={"limit": "60", "order": "asc"})
    assert [s["sandboxID"] for s in page] == made[:60], "order=asc is the order of creation"
    status, hdrs2, rest = t.client.request("GET", "/v2/sandboxes", query={"limit": "60", "order": "asc",
                                                                         "nextToken": hdrs["x-next-token"]})
    assert [s["sandboxID"] for s in rest] == made[60:] and "x-next-token" not in hdrs2
    # by template, by start
    assert t.client.request("GET", "/v2/sandboxes", query={"template": "code-interpreter-v1"})[2] == []
    assert len(t.client.request("GET", "/v2/sandboxes", query={"template": "base"})[2]) == 100
    assert t.client.request("GET", "/v2/sandboxes", query={"startedAfter": "2999-01-01T00:00:00.000Z"})[2] == []
    assert len(t.client.request("GET", "/v2/sandboxes", query={"startedAfter": "2000-01-01T00:00:00Z"})[2]) == 100
    for bad in [{"startedAfter": "yesterday"}, {"order": "random"}, {"state": "dead"}, {"limit": "0"}]:
        assert t.client.request("GET", "/v2/sandboxes", query=bad)[0] == 400, bad
    assert t.client.request("DELETE", f"/sandboxes/{made[0]}")[0] == 204
    create(t.client)


def test_the_workspace_bounds_a_sandboxs_life(service):
    """sandbox_max_timeout_s: create, setTimeout and connect stay within it;
    the default (300 s) is cut to it."""
    assert service.ok("GET", "/v1/settings")["sandbox_max_timeout_s"] == 3600
    status, _, doc = service.request("PATCH", "/v1/settings", json={"sandbox_max_timeout_s": 86401})
    assert status == 400, (status, doc)
    service.ok("PATCH", "/v1/settings", json={"sandbox_max_timeout_s": 30})
    try:
        status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", "timeout": 31})
        assert status == 400 and "sandbox_max_timeout_s" in doc["message"], (status, doc)
        sid, _ = create(service)
        info = service.ok("GET", f"/sandboxes/{sid}")
        left = parse_time(info["endAt"]).timestamp() - time.time()
        assert 20 < left <= 31, info
        status, _, doc = service.request("POST", f"/sandboxes/{sid}/timeout", json={"timeout": 60})
        assert status == 400 and "sandbox_max_timeout_s" in doc["message"], (status, doc)
        status, _, doc = service.request("POST", f"/v2/sandboxes/{sid}/connect", json={"timeout": 3600})
        assert status == 400, (status, doc)
        assert service.request("DELETE", f"/sandboxes/{sid}")[0] == 204
    finally:
        service.ok("PATCH", "/v1/settings", json={"sandbox_max_timeout_s": 3600})
