"""Runtime images (issue 3): the store, digests, verify, rm, and runs on an image.

The trees here are small ones the tests make from the host's own bash and
its libraries (the default image, built with debootstrap, is its own test).
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import AIRLOCK, airlock


def tiny_tree(dest: Path):
    """bash, cat, ls and their libraries: enough to run a bash script."""
    (dest / "usr/bin").mkdir(parents=True)
    (dest / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (dest / "usr/lib64").mkdir(parents=True)
    (dest / "etc").mkdir()
    for b in ("bash", "cat", "ls"):
        shutil.copy2(f"/usr/bin/{b}", dest / "usr/bin" / b)
    libs = set()
    for b in ("bash", "cat", "ls"):
        out = subprocess.run(["ldd", f"/usr/bin/{b}"], capture_output=True, text=True).stdout
        libs |= {w for w in out.split() if w.startswith("/")}
    for lib in libs:
        target = dest / ("usr/lib64" if "ld-linux" in lib else "usr/lib/x86_64-linux-gnu") / os.path.basename(lib)
        shutil.copy2(os.path.realpath(lib), target)
    for name, to in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        os.symlink(to, dest / name)
    (dest / "etc/passwd").write_text("nobody:x:65534:65534:nobody:/tmp:/bin/bash\n")
    (dest / "etc/marker").write_text("tiny image\n")


@pytest.fixture
def store(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    tree = tmp_path / "tree"
    tiny_tree(tree)
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "build.sh").write_text(f'#!/bin/sh\nset -eu\ncp -a "{tree}" "$1"\necho "image: step 1/1: copied"\n')
    return state, recipe, tree


def image(state, *args, check=True):
    p = airlock("image", "--state", state, *args)
    if check:
        assert p.returncode == 0, (p.stdout, p.stderr)
    return p


def run_on(state, name, code):
    env = dict(os.environ, AIRLOCK_STATE=str(state))
    p = subprocess.run([str(AIRLOCK), "run", "--json", "--image", name, "--lang", "bash", "-c", code],
                       capture_output=True, timeout=60, env=env)
    return p.returncode, json.loads(p.stdout) if p.stdout else None, p.stderr


def test_build_ls_run_verify_rm(store):
    state, recipe, _ = store
    p = image(state, "build", "--recipe", recipe, "--alias", "tiny")
    digest = p.stdout.decode().strip()
    assert digest.startswith("sha256:") and len(digest) == 71
    assert b"new" in p.stderr
    listing = json.loads(image(state, "ls", "--json").stdout)
    assert [e["digest"] for e in listing] == [digest]
    assert listing[0]["aliases"] == ["tiny"]

    status, doc, err = run_on(state, "tiny", "cat /etc/marker; ls /usr/bin")
    assert status == 0, err
    assert doc["stdout"].splitlines() == ["tiny image", "bash", "cat", "ls"]
    assert doc["box"]["runtime"] == digest            # the run reports what it ran on
    status, doc, err = run_on(state, digest, "cat /etc/marker")
    assert status == 0 and doc["stdout"] == "tiny image\n"

    assert image(state, "verify", "tiny").returncode == 0
    rootfs = state / "images" / ("sha256-" + digest[7:]) / "rootfs"
    with open(rootfs / "etc/marker", "a") as f:
        f.write("changed\n")
    p = image(state, "verify", digest, check=False)
    assert p.returncode == 1 and b"CHANGED" in p.stdout and b"/etc/marker" in p.stdout

    image(state, "rm", digest)
    assert json.loads(image(state, "ls", "--json").stdout) == []
    status, _, err = run_on(state, "tiny", "true")
    assert status == 125 and b"no image" in err


def test_same_tree_same_digest(store):
    state, recipe, _ = store
    a = image(state, "build", "--recipe", recipe).stdout.strip()
    p = image(state, "build", "--recipe", recipe)
    assert p.stdout.strip() == a
    assert b"digest unchanged" in p.stderr
    assert len(json.loads(image(state, "ls", "--json").stdout)) == 1


def test_a_recipe_that_changed_but_made_the_same_tree_is_recorded(store):
    """The tests' image cache is keyed by the recipe's hash (image_util.py):
    a rebuild that makes a tree already stored records the recipe that made
    it this time, keeping when it was first made."""
    state, recipe, _ = store
    digest = image(state, "build", "--recipe", recipe).stdout.decode().strip()
    first = json.loads(image(state, "ls", "--json").stdout)[0]
    with open(recipe / "build.sh", "a") as f:
        f.write("# a comment: a new recipe, the same tree\n")
    p = image(state, "build", "--recipe", recipe)
    assert p.stdout.decode().strip() == digest and b"digest unchanged" in p.stderr
    [now] = json.loads(image(state, "ls", "--json").stdout)
    assert now["recipe_sha256"] != first["recipe_sha256"]
    assert now["created"] == first["created"] and now["bytes"] == first["bytes"]


def test_failed_build_leaves_nothing(store, tmp_path):
    state, _, _ = store
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "build.sh").write_text('#!/bin/sh\nmkdir -p "$1/usr"; echo "E: Unable to locate package nosuch" >&2; exit 100\n')
    p = image(state, "build", "--recipe", bad, check=False)
    assert p.returncode == 125 and b"nothing was stored" in p.stderr
    assert [e for e in (state / "images").iterdir() if e.name != "aliases"] == []


def test_image_whose_usr_is_a_link_to_the_host_is_refused(store):
    """An image is content: a /usr that is a link to / must never bind the host's root."""
    state, recipe, tree = store
    shutil.rmtree(tree / "usr")
    os.symlink("/", tree / "usr")
    digest = image(state, "build", "--recipe", recipe).stdout.decode().strip()
    status, doc, err = run_on(state, digest, "ls /usr/bin | head -1")
    assert status == 125, doc
    assert b"open /usr in the image" in err


def test_bad_names_are_clear_errors(store):
    state, _, _ = store
    for name in ("../../etc", "sha256:xyz", "nosuch"):
        status, _, err = run_on(state, name, "true")
        assert status == 125 and (b"bad image" in err or b"no image" in err), (name, err)


def test_a_bundled_recipe_is_built_by_its_name_under_its_name(store, tmp_path):
    """`airlock image build bookworm` builds image/bookworm as the alias
    bookworm; `build` alone is still the default; a name that is a path is
    refused before anything runs."""
    state, recipe, _ = store
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    shutil.copytree(recipe, recipes / "mini")
    shutil.copytree(recipe, recipes / "default")
    env = dict(os.environ, AIRLOCK_RECIPES=str(recipes))

    def build(*args):
        return subprocess.run([str(AIRLOCK), "image", "--state", str(state), "build", *args], capture_output=True,
                              env=env, timeout=120)
    p = build("mini")
    assert p.returncode == 0, p.stderr
    digest = p.stdout.decode().strip()
    assert str(recipes / "mini").encode() in p.stderr
    assert build().returncode == 0
    aliases = {e["digest"]: e["aliases"] for e in json.loads(image(state, "ls", "--json").stdout)}
    assert sorted(aliases[digest]) == ["default", "mini"], aliases      # the same tree: one image
    p = build("nosuch")
    assert p.returncode == 125 and b"no nosuch recipe" in p.stderr and str(recipes / "nosuch").encode() in p.stderr
    for bad in (["../mini"], [".hidden"], ["mini", "--recipe", str(recipe)], ["mini", "default"]):
        p = build(*bad)
        assert p.returncode == 125 and b"usage: airlock image" in p.stderr, (bad, p.stderr)


def test_ls_and_doctor_show_what_a_built_tree_holds(store):
    """The Debian release, Python, Node and library versions its manifest
    records, on one line; a control byte in them is shown as '?', never
    sent to the terminal."""
    state, recipe, tree = store
    (tree / "usr/share/airlock").mkdir(parents=True)
    (tree / "usr/share/airlock/manifest.json").write_text(json.dumps({
        "system": {"debian_version": "13.1", "version_id": "13"}, "source": {"suite": "trixie"},
        "python": {"version": "3.13.5\x1b[2J", "libraries": {"fpdf2": {"version": "2.8.3"},
                                                              "numpy": {"version": "2.2.4"}}},
        "node": {"version": "20.19.2"}}))
    digest = image(state, "build", "--recipe", recipe).stdout.decode().strip()
    want = "Debian 13.1 (trixie), python 3.13.5?[2J, node 20.19.2 (fpdf2 2.8.3, numpy 2.2.4)"
    ls = image(state, "ls").stdout.decode()
    assert want in ls and "\x1b" not in ls, ls
    p = subprocess.run([str(AIRLOCK), "doctor"], capture_output=True, timeout=60,
                       env=dict(os.environ, AIRLOCK_STATE=str(state)))
    text = p.stdout.decode()
    assert f"image:   {digest} default\n         {want}\n" in text and "\x1b" not in text, text[-600:]


# ------------------------------------------------------------------ import

import io
import tarfile


def tar_bytes(entries):
    """entries: (TarInfo fields dict, bytes or None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for fields, data in entries:
            ti = tarfile.TarInfo(fields.pop("name"))
            for k, v in fields.items():
                setattr(ti, k, v)
            if data is not None:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            else:
                t.addfile(ti)
    return buf.getvalue()


def docker_save(path, layers):
    """A `docker save` tarball: manifest.json and one layer.tar per layer."""
    outer = []
    names = []
    for i, layer in enumerate(layers):
        n = f"layer{i}/layer.tar"
        names.append(n)
        outer.append(({"name": n}, layer))
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["test:1"], "Layers": names}]).encode()
    outer.append(({"name": "manifest.json"}, manifest))
    outer.append(({"name": "config.json"}, b"{}"))
    path.write_bytes(tar_bytes(outer))


def tree_layer(tree: Path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(tree, arcname=".")
    return buf.getvalue()


def test_import_round_trip_with_whiteouts(store, tmp_path):
    state, _, tree = store
    (tree / "etc/gone").write_text("removed by the next layer\n")
    top = tar_bytes([({"name": "etc/.wh.gone"}, b""), ({"name": "etc/added", "mode": 0o4755}, b"from layer 2\n")])
    tb = tmp_path / "app.tar"
    docker_save(tb, [tree_layer(tree), top])
    p = image(state, "import", tb, "--alias", "app")
    digest = p.stdout.decode().strip()
    status, doc, err = run_on(state, "app", "cat /etc/marker /etc/added; ls /etc; ls -l /etc/added")
    assert status == 0, err
    out = doc["stdout"]
    assert "tiny image\nfrom layer 2\n" in out
    assert "gone" not in out                      # the whiteout removed it
    assert "-rwxr-xr-x" in out                    # setuid dropped
    assert doc["box"]["runtime"] == digest
    # the same tarball again is the same image
    assert image(state, "import", tb).stdout.decode().strip() == digest


HOSTILE = {
    "traversal": [({"name": "../../../../tmp/airlock-pwned"}, b"x")],
    "absolute": [({"name": "/tmp/airlock-pwned"}, b"x")],
    "symlink_then_write": [({"name": "esc", "type": tarfile.SYMTYPE, "linkname": "/tmp"}, None),
                           ({"name": "esc/airlock-pwned"}, b"x")],
    "device": [({"name": "dev/mem", "type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 1}, None)],
    "hardlink_out": [({"name": "h", "type": tarfile.LNKTYPE, "linkname": "../../etc/passwd"}, None)],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_tarballs_are_refused(store, tmp_path, kind):
    state, _, _ = store
    tb = tmp_path / f"{kind}.tar"
    docker_save(tb, [tar_bytes([(dict(f), d) for f, d in HOSTILE[kind]])])
    before = set(os.listdir("/tmp"))
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"nothing was stored" in p.stderr
    assert not Path("/tmp/airlock-pwned").exists()
    # only what the attack names: other processes of a shared machine make /tmp entries too
    assert [n for n in set(os.listdir("/tmp")) - before if "airlock-pwned" in n] == []
    images = state / "images"
    assert [e.name for e in images.iterdir()] in ([], ["aliases"]), list(images.iterdir())


def test_entry_count_bomb_is_refused(store, tmp_path):
    state, _, _ = store
    tb = tmp_path / "many.tar"
    docker_save(tb, [tar_bytes([({"name": f"f{i}"}, b"") for i in range(1100)])])
    env = dict(os.environ, AIRLOCK_IMPORT_MAX_ENTRIES="1000")
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "import", str(tb)], capture_output=True, env=env)
    assert p.returncode == 125 and b"more than 1000 entries" in p.stderr


def test_not_an_image_tarball(store, tmp_path):
    state, _, _ = store
    tb = tmp_path / "plain.tar"
    tb.write_bytes(tar_bytes([({"name": "hello.txt"}, b"hi")]))
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125 and b"no layers" in p.stderr


def test_import_oci_layout(store, tmp_path):
    """An OCI image layout tarball: index.json -> manifest blob -> gzip layers."""
    import gzip
    import hashlib
    state, _, tree = store
    layer = gzip.compress(tree_layer(tree))
    ld = hashlib.sha256(layer).hexdigest()
    manifest = json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": f"sha256:{ld}", "size": len(layer)}]}).encode()
    md = hashlib.sha256(manifest).hexdigest()
    index = json.dumps({"schemaVersion": 2, "manifests": [{"digest": f"sha256:{md}", "size": len(manifest)}]}).encode()
    tb = tmp_path / "oci.tar"
    tb.write_bytes(tar_bytes([({"name": "oci-layout"}, b'{"imageLayoutVersion": "1.0.0"}'),
                              ({"name": "index.json"}, index),
                              ({"name": f"blobs/sha256/{md}"}, manifest),
                              ({"name": f"blobs/sha256/{ld}"}, layer)]))
    digest = image(state, "import", tb, "--alias", "oci").stdout.decode().strip()
    status, doc, err = run_on(state, "oci", "cat /etc/marker")
    assert status == 0 and doc["stdout"] == "tiny image\n", err
    assert doc["box"]["runtime"] == digest
