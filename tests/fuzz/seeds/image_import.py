#!/usr/bin/env python3
"""Seeds for the image-import fuzz target (tests/fuzz/fuzz_image_import.c):
small `docker save` and OCI-layout tarballs, valid and hostile, written to
tests/fuzz/corpus/image-import/, and the reproducers of the parser's past
findings to tests/fuzz/regress/image-import/. Deterministic (mtime 0, fixed
owners), so running it again rewrites the same bytes.

    python3 tests/fuzz/seeds/image_import.py
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "corpus" / "image-import"
REGRESS = HERE.parent / "regress" / "image-import"
# the target's canary directory: an entry written through a symlink to it
# would be outside the images directory
CANARY = "/tmp/airlock-fuzz-image-import-canary"


def tar_bytes(entries, fmt=tarfile.USTAR_FORMAT):
    """entries: (name, data or None, TarInfo fields)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, data, fields in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            ti.mode = 0o644
            ti.uname = ti.gname = ""
            for k, v in fields.items():
                setattr(ti, k, v)
            if data is not None:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            else:
                t.addfile(ti)
    return buf.getvalue()


def d(name, mode=0o755):
    return (name, None, {"type": tarfile.DIRTYPE, "mode": mode})


def f(name, data, mode=0o644):
    return (name, data, {"mode": mode})


def sym(name, target):
    return (name, None, {"type": tarfile.SYMTYPE, "linkname": target})


def hard(name, target):
    return (name, None, {"type": tarfile.LNKTYPE, "linkname": target})


def docker_save(layers, names=None, extra=(), manifest=None):
    names = names or [f"layer{i}/layer.tar" for i in range(len(layers))]
    outer = [f(n, l) for n, l in zip(names, layers)]
    if manifest is None:
        manifest = json.dumps([{"Config": "config.json", "RepoTags": ["fuzz:1"], "Layers": names}]).encode()
    outer += [f("manifest.json", manifest), f("config.json", b"{}")] + list(extra)
    return tar_bytes(outer)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def gz(b):
    return gzip.compress(b, mtime=0)


def oci(layers, tamper=False):
    """An OCI image layout: oci-layout, index.json, and every blob named by
    its digest (TAMPER: the layer's blob does not hold what its name says)."""
    config = b'{"architecture":"amd64","os":"linux"}'
    man = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + sha(config), "size": len(config)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + sha(l),
                                  "size": len(l)} for l in layers]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{"digest": "sha256:" + sha(man), "size": len(man)}]}).encode()
    outer = [f("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), f("index.json", index),
             f("blobs/sha256/" + sha(man), man), f("blobs/sha256/" + sha(config), config)]
    for l in layers:
        outer.append(f("blobs/sha256/" + sha(l), l + (b"x" if tamper else b"")))
    return tar_bytes(outer)


BASE = tar_bytes([d("./"), d("etc"), f("etc/hostname", b"fuzz\n"), f("etc/gone", b"removed later\n"),
                  d("bin"), f("bin/sh", b"#!/bin/true\n", 0o755), sym("bin/bash", "sh"),
                  hard("bin/dash", "bin/sh"), d("var/cache", 0o1777), f("var/cache/old", b"cached\n")])
TOP = tar_bytes([f("etc/.wh.gone", b""), f("var/cache/.wh..wh..opq", b""), f("var/cache/new", b"fresh\n"),
                 f("etc/added", b"setuid dropped\n", 0o4755), f("etc/sgid", b"setgid dropped\n", 0o2755)])


def sparse_layer(apparent):
    """A GNU sparse file of APPARENT bytes in a tarball of a few KiB (what
    python's tarfile cannot write, GNU tar can)."""
    with tempfile.TemporaryDirectory() as t:
        with open(os.path.join(t, "big"), "wb") as fh:
            fh.write(b"start")
            fh.truncate(apparent)
        out = os.path.join(t, "layer.tar")
        subprocess.run(["tar", "--sparse", "--format=gnu", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
                        "-cf", out, "-C", t, "big"], check=True)
        return Path(out).read_bytes()


def seeds():
    s = {}
    # valid: what an import must take, and keep exactly
    s["docker-basic.tar"] = docker_save([BASE])
    s["docker-whiteouts.tar"] = docker_save([BASE, TOP])
    s["docker-layers-out-of-order.tar"] = docker_save([TOP, BASE], names=["b/layer.tar", "a/layer.tar"],
                                                      manifest=json.dumps([{"Layers": ["a/layer.tar", "b/layer.tar"]}]).encode())
    s["docker-gzip-outer.tar.gz"] = gz(docker_save([BASE]))
    s["docker-gzip-layer.tar"] = docker_save([gz(BASE)])
    s["docker-outer-hardlink.tar"] = docker_save([BASE], names=["a/layer.tar"],
                                                 manifest=json.dumps([{"Layers": ["b/layer.tar"]}]).encode(),
                                                 extra=[hard("b/layer.tar", "a/layer.tar")])
    s["docker-pax-long-name.tar"] = docker_save([tar_bytes([f("d/" + "n" * 200, b"long\n")], fmt=tarfile.PAX_FORMAT)])
    s["docker-sparse-small.tar"] = docker_save([BASE, sparse_layer(64 << 10)])
    s["oci-basic.tar"] = oci([BASE])
    s["oci-two-layers.tar"] = oci([BASE, gz(TOP)])
    # hostile: each must be refused, or imported harmlessly
    s["hostile-dotdot.tar"] = docker_save([tar_bytes([f("../escape", b"x")])])
    s["hostile-absolute.tar"] = docker_save([tar_bytes([f("/etc/escape", b"x")])])
    s["hostile-symlink-abs.tar"] = docker_save([tar_bytes([sym("esc", CANARY), f("esc/pwned", b"x")])])
    s["hostile-symlink-up.tar"] = docker_save([tar_bytes([sym("up", "../../../.."), f("up/pwned", b"x")])])
    s["hostile-symlink-replace.tar"] = docker_save([BASE, tar_bytes([sym("etc", CANARY), f("etc/hostname", b"x")])])
    s["hostile-hardlink-out.tar"] = docker_save([tar_bytes([hard("pw", "../../etc/passwd")])])
    s["hostile-hardlink-abs.tar"] = docker_save([tar_bytes([hard("pw", "/etc/passwd")])])
    s["hostile-hardlink-via-symlink.tar"] = docker_save([tar_bytes([sym("s", CANARY), hard("pw", "s/x")])])
    s["hostile-device.tar"] = docker_save([tar_bytes([f("ok", b"x"), ("dev/null", None, {"type": tarfile.CHRTYPE,
                                                                                          "devmajor": 1, "devminor": 3})])])
    s["hostile-fifo-socket.tar"] = docker_save([tar_bytes([f("ok", b"x"), ("p", None, {"type": tarfile.FIFOTYPE})])])
    s["hostile-hardlinks-over-cap.tar"] = docker_save(
        [gz(tar_bytes([f("big", bytes(1 << 20))] + [hard(f"l{i}", "big") for i in range(5)]))])
    s["hostile-file-over-cap.tar"] = docker_save([gz(tar_bytes([f("big", bytes(5 << 20))]))])
    s["hostile-size-lies.tar"] = docker_save([tar_bytes([f("big", b"y" * 600)])[:1024]])
    s["hostile-deep.tar"] = docker_save([tar_bytes([f("/".join(["d"] * 70) + "/f", b"x")], fmt=tarfile.PAX_FORMAT)])
    s["hostile-outer-manifest-symlink.tar"] = tar_bytes([f("layer0/layer.tar", BASE), sym("manifest.json", "/etc/passwd")])
    s["hostile-outer-layer-fifo.tar"] = tar_bytes([("layer0/layer.tar", None, {"type": tarfile.FIFOTYPE}),
                                                   f("manifest.json", json.dumps([{"Layers": ["layer0/layer.tar"]}]).encode())])
    s["hostile-outer-layer-dotdot.tar"] = docker_save([BASE], manifest=json.dumps([{"Layers": ["../layer0/layer.tar"]}]).encode())
    s["hostile-missing-layer.tar"] = docker_save([BASE], manifest=json.dumps([{"Layers": ["nope/layer.tar"]}]).encode())
    s["hostile-manifest-not-json.tar"] = docker_save([BASE], manifest=b"[{\"Layers\": [")
    s["hostile-oci-tampered.tar"] = oci([BASE], tamper=True)
    s["hostile-wh-dotdot.tar"] = docker_save([BASE, tar_bytes([f(".wh..", b""), f("etc/.wh...", b"")])])
    s["hostile-not-a-tar.bin"] = b"\x1f\x8b\x08\x00" + b"not really gzip" * 4
    return s


def regress():
    r = {}
    # a GNU sparse entry of 1 GiB in a few KiB: its holes were not counted
    # against the byte cap (then written, and hashed, in full)
    r["sparse-entry.tar"] = docker_save([BASE, sparse_layer(1 << 30)])
    # a layer with no entries at all: the manifest of an empty tree called
    # qsort(NULL, 0) (UBSan)
    r["empty-image.tar"] = docker_save([tar_bytes([])])
    return r


def main():
    for where, files in ((CORPUS, seeds()), (REGRESS, regress())):
        where.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            assert len(data) < 64 << 10, (name, len(data))
            (where / name).write_bytes(data)
        print(f"{len(files)} files in {where}")


if __name__ == "__main__":
    main()
