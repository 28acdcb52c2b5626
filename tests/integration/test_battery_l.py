"""Battery group L: hostile images (issue 11).

An imported image is untrusted content, and so is the tarball it came in:
nothing in either may make airlock read a host file, block, or spend work
that was not counted. Each case is differential: it shows the hostile
ingredient is really there (the link in the stored tree points at the host
canary, the entry really is sparse, ...) and then that airlock is not fooled.
"""
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import AIRLOCK
from test_image import docker_save, image, run_on, store, tar_bytes, tiny_tree, tree_layer  # noqa: F401


@pytest.fixture
def canary():
    """A host file only root may read, holding a secret no image may carry."""
    secret = "airlock-canary-" + secrets.token_hex(16)
    path = Path("/tmp") / ("airlock-l-canary-" + secrets.token_hex(6))
    path.write_text(secret + "\n")
    os.chmod(path, 0o600)
    yield path, secret
    path.unlink()


@pytest.fixture
def canary_dir(canary):
    """A host directory shaped like a seed, its file the canary's secret."""
    path, secret = canary
    d = Path(str(path) + ".d")
    (d / "matplotlib").mkdir(parents=True)
    (d / "matplotlib" / "fontlist.json").write_text(secret + "\n")
    os.chmod(d / "matplotlib" / "fontlist.json", 0o600)
    yield d, secret
    shutil.rmtree(d)


def stored_tree(state, digest):
    return state / "images" / ("sha256-" + digest[7:]) / "rootfs"


def all_output(doc, err):
    return json.dumps(doc) + (err or b"").decode(errors="replace")


def import_tree(state, tmp_path, tree, name="hostile.tar"):
    tb = tmp_path / name
    docker_save(tb, [tree_layer(tree)])
    return image(state, "import", tb).stdout.decode().strip()


# --------------------------------------------------- 1. the font-cache seed

@pytest.mark.parametrize("where", ["seed", "parent"])
def test_a_seed_link_never_stages_a_host_file(store, tmp_path, canary, canary_dir, where):
    """usr/share/airlock/matplotlib (or a directory above it) a link to a host
    file: the box must never receive the host file's bytes."""
    state, _, tree = store
    (tree / "usr/share/airlock").mkdir(parents=True)
    if where == "seed":
        target, secret = canary
        os.symlink(str(target), tree / "usr/share/airlock/matplotlib")
        link = "usr/share/airlock/matplotlib"
    else:
        target, secret = canary_dir
        (tree / "usr/share/airlock").rmdir()
        os.symlink(str(target), tree / "usr/share/airlock")
        link = "usr/share/airlock"
    digest = import_tree(state, tmp_path, tree)
    # the ingredient: the stored tree really holds a link to the host file
    assert os.readlink(stored_tree(state, digest) / link) == str(target)
    status, doc, err = run_on(state, digest, "cat /tmp/.matplotlib /tmp/.matplotlib/* 2>/dev/null; echo done")
    assert secret not in all_output(doc, err)
    # refused, and said so
    assert status == 125, (doc, err)
    assert b"usr/share/airlock/matplotlib in the image" in err and b"refused" in err, err


def test_the_seed_is_read_with_the_box_s_rights(store, tmp_path):
    """A file of the image the box cannot read (root's, 0600) must not become
    readable to the box by being staged into its /tmp as root."""
    state, _, tree = store
    secret = "image-private-" + secrets.token_hex(8)
    (tree / "etc/private").write_text(secret + "\n")
    os.chmod(tree / "etc/private", 0o600)
    # the ingredient: where it lies in the image, the box cannot read it
    plain = import_tree(state, tmp_path, tree, "plain.tar")
    status, doc, err = run_on(state, plain, "cat /etc/private; echo rc=$?")
    assert status == 0, err
    assert secret not in doc["stdout"] and "rc=1" in doc["stdout"]
    # the same file in the seed (a copy, and a hard link to /etc/private)
    seed = tree / "usr/share/airlock/matplotlib"
    seed.mkdir(parents=True)
    (seed / "fontlist.json").write_text("{}\n")
    os.link(tree / "etc/private", seed / "private")
    digest = import_tree(state, tmp_path, tree)
    status, doc, err = run_on(state, digest, "cat /tmp/.matplotlib/private; echo rc=$?")
    assert secret not in all_output(doc, err)
    assert status == 125 and b"Permission denied" in err, (doc, err)


def test_a_plain_seed_is_still_staged_writable(store, tmp_path):
    state, _, tree = store
    seed = tree / "usr/share/airlock/matplotlib"
    (seed / "sub").mkdir(parents=True)
    (seed / "fontlist.json").write_text('{"fonts": 1}\n')
    (seed / "sub/x").write_text("x\n")
    digest = import_tree(state, tmp_path, tree)
    status, doc, err = run_on(state, digest, "cat /tmp/.matplotlib/fontlist.json /tmp/.matplotlib/sub/x; "
                                             "echo more >> /tmp/.matplotlib/fontlist.json && echo writable")
    assert status == 0, err
    assert doc["stdout"] == '{"fonts": 1}\nx\nwritable\n'
