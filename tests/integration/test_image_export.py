"""`airlock image export`: an image as an OCI image a cluster pulls by
digest. The default image goes out as a layout, into a real registry
(Debian's docker-registry) with skopeo, and back by digest into a real
dockerd, where Python runs in it as uid 65534; exported again, it has the
same digest; its archive form loads with skopeo too. A small image built
here holds what a tree may hold that is awkward (long and non-UTF-8 names,
links out of the tree, a setuid bit, old and new mtimes) and checks the
layer's bytes themselves; a FIFO in a tree is refused, leaving nothing."""
import gzip
import io
import json
import os
import subprocess
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

import docker_util
import image_util
import registry_util
from conftest import AIRLOCK


def export(state, name, out, *extra, timeout=180):
    t0 = time.monotonic()
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "export", name, "--out", str(out), "--json",
                        *extra], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.loads(p.stdout), time.monotonic() - t0


def manifest_of(layout, result):
    return json.loads(blob(layout, result["digest"]))


def manifest_layers(m):
    return m["layers"]


def blob(layout, digest):
    return (Path(layout) / "blobs" / "sha256" / digest.split(":", 1)[1]).read_bytes()


@pytest.fixture(scope="module")
def registry():
    r = registry_util.start()
    yield r
    registry_util.stop()


def registry_manifest(registry, repo, digest):
    """The manifest the registry serves for REPO@DIGEST (what a kubelet pulls)."""
    req = urllib.request.Request(f"http://{registry.host}/v2/{repo}/manifests/{digest}",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Docker-Content-Digest"] == digest
        return json.loads(r.read())


def push_archive(registry, tar, repo):
    """skopeo copy oci-archive:TAR to REPO, digests preserved; the digest it landed as."""
    digestfile = tar.parent / (tar.name + ".digest")
    p = subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", "--digestfile",
                        str(digestfile), f"oci-archive:{tar}", f"docker://{registry.host}/{repo}:pushed"],
                       capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return digestfile.read_text().strip()


def test_default_image_pushed_pulled_by_digest_and_run(tmp_path, registry, dockerd):
    entry = image_util.ensure_default_image()
    state = image_util.CACHE
    first, took = export(state, "default", tmp_path / "a")
    print(f"export of the default image: {took:.1f} s, layer {first['layer_bytes'] / 1e6:.0f} MB")
    assert took < 60, f"the export took {took:.1f} s"
    # the second export runs beside the push and the pull (two cores)
    second = subprocess.Popen([str(AIRLOCK), "image", "--state", str(state), "export", "default", "--out",
                               str(tmp_path / "b"), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL)
    try:
        digest = first["digest"]
        assert first["image"] == entry["digest"]
        # what the driver reads: the image's oci.json, written by the export
        rec = json.loads((state / "images" / entry["digest"].replace(":", "-") / "oci.json").read_text())
        assert rec["manifest_digest"] == digest and rec["config_digest"] == first["config_digest"]
        assert set(rec) == {"manifest_digest", "config_digest", "exported_at"}
        # the layout is what it says: index -> manifest -> config + the one layer
        index = json.loads((tmp_path / "a" / "index.json").read_text())
        assert [m["digest"] for m in index["manifests"]] == [digest]
        manifest = json.loads(blob(tmp_path / "a", digest))
        config = json.loads(blob(tmp_path / "a", manifest["config"]["digest"]))
        assert config["config"]["User"] == "65534" and config["config"]["WorkingDir"] == "/work"
        assert config["config"]["Env"] == ["PATH=/usr/local/bin:/usr/bin:/bin"]
        assert config["rootfs"] == {"type": "layers", "diff_ids": [first["diff_id"]]}
        assert [la["mediaType"] for la in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar+gzip"]

        t0 = time.monotonic()
        # (registry_util's push takes a skopeo source and answers the digest)
        assert registry.push(f"oci:{tmp_path / 'a'}") == digest
        ref = registry.ref(digest)
        assert ref == f"{registry.host}/{registry_util.REPO}@{digest}"
        assert registry_manifest(registry, registry_util.REPO, digest)["config"]["digest"] == first["config_digest"]
        docker_util.docker("pull", ref, timeout=300)
        run = docker_util.docker("run", "--rm", "--network", "none", "--read-only", "--cap-drop", "ALL",
                                 "--security-opt", "no-new-privileges", ref, "sh", "-c",
                                 "id -u; id -g; pwd; python3 -c 'print(1)'", check=False, timeout=120)
        assert run.returncode == 0, run.stderr.decode(errors="replace")
        # the image's own User and WorkingDir: 65534 in /work, no flag needed
        assert run.stdout.decode().split() == ["65534", "65534", "/work", "1"]
        print(f"push, pull and run: {time.monotonic() - t0:.1f} s")
    finally:
        out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err.decode(errors="replace")
    assert json.loads(out)["digest"] == digest, "two exports of one image gave two digests"
    assert (tmp_path / "a" / "index.json").read_bytes() == (tmp_path / "b" / "index.json").read_bytes()
    docker_util.docker("rmi", ref, check=False)


RECIPE = r"""#!/bin/sh
set -eu
r=$1
mkdir -p "$r/usr/bin" "$r/etc" "$r/d/$(printf 'x%.0s' $(seq 1 120))/deep"
printf 'hello\n' > "$r/etc/hello"
printf 'long\n' > "$r/d/$(printf 'x%.0s' $(seq 1 120))/deep/$(printf 'y%.0s' $(seq 1 110))"
printf 'latin1\n' > "$r/etc/caf$(printf '\351')"
printf '#!/bin/sh\n' > "$r/usr/bin/tool"
chmod 4755 "$r/usr/bin/tool"
chown 1234:2345 "$r/etc/hello"
ln -s /etc/passwd "$r/etc/out-abs"
ln -s ../../../../etc/shadow "$r/etc/out-rel"
touch -d 2001-02-03T04:05:06Z "$r/etc/hello"
touch -d 2099-01-01T00:00:00Z "$r/usr/bin/tool"
"""


def small_image(tmp_path, extra=""):
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "build.sh").write_text(RECIPE + extra)
    state = tmp_path / "state"
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "build", "--recipe", str(recipe),
                        "--alias", "small"], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return state, p.stdout.decode().strip()


def test_small_image_layer_bytes_and_archive(tmp_path, registry):
    state, image = small_image(tmp_path)
    a, _ = export(state, "small", tmp_path / "a")
    b, _ = export(state, image, tmp_path / "b.tar", "--format", "oci-archive")
    assert a["digest"] == b["digest"] and a["image"] == image
    manifest = json.loads(blob(tmp_path / "a", a["digest"]))
    layer = blob(tmp_path / "a", manifest["layers"][0]["digest"])
    # gzip: no mtime, no name (FLG has no FNAME), as the determinism needs
    assert layer[:3] == b"\x1f\x8b\x08" and layer[3] & 0x08 == 0 and layer[4:8] == b"\0\0\0\0"
    raw = gzip.decompress(layer)
    import hashlib
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == a["diff_id"]
    with tarfile.open(fileobj=io.BytesIO(raw), encoding="utf-8", errors="surrogateescape") as t:
        members = t.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.encode("utf-8", "surrogateescape").split(b"/")), names
    by = {m.name: m for m in members}
    created = json.loads(next((state / "images").glob("sha256-*/info.json")).read_text())["created"]
    clamp = int(time.mktime(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ"))) - time.timezone
    assert by["etc/hello"].mtime == 981173106 and (by["etc/hello"].uid, by["etc/hello"].gid) == (1234, 2345)
    assert by["usr/bin/tool"].mtime == clamp and by["usr/bin/tool"].mode == 0o4755
    assert by["etc/out-abs"].issym() and by["etc/out-abs"].linkname == "/etc/passwd"
    assert by["etc/out-rel"].issym() and by["etc/out-rel"].linkname == "../../../../etc/shadow"
    assert any(n.startswith("d/" + "x" * 120 + "/deep/" + "y" * 110) for n in names)
    assert any(n.encode("utf-8", "surrogateescape") == b"etc/caf\xe9" for n in names)
    # the archive is the same image: skopeo reads it, the registry takes it under the same digest
    assert push_archive(registry, tmp_path / "b.tar", "airlock/small") == a["digest"]
    assert registry_manifest(registry, "airlock/small", a["digest"])["layers"] == manifest_layers(manifest_of(tmp_path / "a", a))
    # a path that exists is not overwritten
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "export", "small", "--out", str(tmp_path / "a")],
                       capture_output=True, timeout=60)
    assert p.returncode == 125 and b"exists" in p.stderr


def test_a_fifo_is_refused_and_nothing_is_left(tmp_path):
    state, _ = small_image(tmp_path, 'mkfifo "$r/etc/pipe"\n')
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "export", "small", "--out", str(tmp_path / "o")],
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 125
    assert b"etc/pipe is not a regular file, directory or symlink" in p.stderr, p.stderr
    assert not any(x.name.startswith("o") for x in tmp_path.iterdir())
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "export", "small", "--out", str(tmp_path / "o"),
                        "--format", "docker"], capture_output=True, timeout=60)
    assert p.returncode == 125 and b"--format is oci or oci-archive" in p.stderr
