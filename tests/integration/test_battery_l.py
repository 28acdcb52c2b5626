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


# --------------------------------------------- 2. the outer tarball's links

def outer_tar(path, entries):
    """entries: (TarInfo fields, bytes or None), as test_image.tar_bytes."""
    path.write_bytes(tar_bytes([(dict(f), d) for f, d in entries]))


def host_file(path, data, mode=0o600):
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


@pytest.fixture
def host_dir():
    """Host files an outer tarball's links point at (outside any test tree)."""
    d = Path("/tmp") / ("airlock-l-host-" + secrets.token_hex(6))
    d.mkdir(mode=0o700)
    yield d
    shutil.rmtree(d)


def secret_layer(tree, secret):
    (tree / "etc/secret").write_text(secret + "\n")
    layer = tree_layer(tree)
    (tree / "etc/secret").unlink()
    return layer


def manifest_for(*layers):
    return json.dumps([{"Config": "config.json", "RepoTags": ["t:1"], "Layers": list(layers)}]).encode()


def assert_nothing_stored(state):
    images = state / "images"
    assert not images.exists() or [e.name for e in images.iterdir()] in ([], ["aliases"]), list(images.iterdir())


def test_an_outer_manifest_link_is_never_read(store, tmp_path, host_dir):
    """manifest.json a link to a host file (here a manifest only root may
    read, naming a layer the tarball holds): refused, never followed."""
    state, _, tree = store
    secret = "airlock-canary-" + secrets.token_hex(16)
    canary = host_file(host_dir / "manifest.json", manifest_for("layer0/layer.tar"))
    tb = tmp_path / "link.tar"
    outer_tar(tb, [({"name": "layer0/layer.tar"}, secret_layer(tree, secret)),
                   ({"name": "manifest.json", "type": tarfile.SYMTYPE, "linkname": str(canary)}, None)])
    # the ingredient: the entry is a link to the host file, which is a manifest
    with tarfile.open(tb) as t:
        assert t.getmember("manifest.json").issym() and t.getmember("manifest.json").linkname == str(canary)
    assert json.loads(canary.read_bytes())[0]["Layers"] == ["layer0/layer.tar"]
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"manifest.json" in p.stderr and b"symbolic link" in p.stderr and b"refused" in p.stderr, p.stderr
    assert b"nothing was stored" in p.stderr
    assert_nothing_stored(state)


@pytest.mark.parametrize("kind", ["docker", "oci"])
def test_an_outer_layer_link_never_imports_a_host_file(store, tmp_path, host_dir, kind):
    """A layer (docker) or blob (OCI) entry that is a link to a host tarball
    only root may read: the host tarball must not become image content."""
    import hashlib
    state, _, tree = store
    secret = "airlock-canary-" + secrets.token_hex(16)
    canary = host_file(host_dir / "secret.tar", secret_layer(tree, secret))
    tb = tmp_path / f"{kind}.tar"
    if kind == "docker":
        outer_tar(tb, [({"name": "layer0/layer.tar", "type": tarfile.SYMTYPE, "linkname": str(canary)}, None),
                       ({"name": "manifest.json"}, manifest_for("layer0/layer.tar"))])
        link = "layer0/layer.tar"
    else:
        ld = hashlib.sha256(canary.read_bytes()).hexdigest()
        man = json.dumps({"schemaVersion": 2, "layers": [{"digest": f"sha256:{ld}"}]}).encode()
        md = hashlib.sha256(man).hexdigest()
        index = json.dumps({"schemaVersion": 2, "manifests": [{"digest": f"sha256:{md}"}]}).encode()
        outer_tar(tb, [({"name": "index.json"}, index), ({"name": f"blobs/sha256/{md}"}, man),
                       ({"name": f"blobs/sha256/{ld}", "type": tarfile.SYMTYPE, "linkname": str(canary)}, None)])
        link = f"blobs/sha256/{ld}"
    with tarfile.open(tb) as t:
        assert t.getmember(link).issym() and t.getmember(link).linkname == str(canary)
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"symbolic link, not a regular file: refused" in p.stderr, p.stderr
    assert secret.encode() not in p.stdout + p.stderr
    assert_nothing_stored(state)


def test_an_outer_layer_link_to_a_fifo_does_not_block(store, tmp_path, host_dir):
    """A layer that is a link to a host FIFO: refused at once (it used to
    block the import for as long as nobody wrote to the FIFO)."""
    state, _, _ = store
    fifo = host_dir / "fifo"
    os.mkfifo(fifo)
    tb = tmp_path / "fifo.tar"
    outer_tar(tb, [({"name": "layer0/layer.tar", "type": tarfile.SYMTYPE, "linkname": str(fifo)}, None),
                   ({"name": "manifest.json"}, manifest_for("layer0/layer.tar"))])
    try:
        p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "import", str(tb)],
                           capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the import blocked on a host FIFO the tarball links to")
    assert p.returncode == 125 and b"symbolic link, not a regular file: refused" in p.stderr, p.stderr
    assert_nothing_stored(state)


def test_an_outer_fifo_entry_is_refused_by_name(store, tmp_path):
    state, _, _ = store
    tb = tmp_path / "fifo.tar"
    outer_tar(tb, [({"name": "layer0/layer.tar", "type": tarfile.FIFOTYPE}, None),
                   ({"name": "manifest.json"}, manifest_for("layer0/layer.tar"))])
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125 and b"\"layer0/layer.tar\" in the tarball is a FIFO, not a regular file" in p.stderr, p.stderr


def test_an_outer_hard_link_to_another_entry_still_works(store, tmp_path):
    """Hard links between the tarball's own entries are content, not the host's."""
    state, _, tree = store
    tb = tmp_path / "hl.tar"
    outer_tar(tb, [({"name": "a/layer.tar"}, tree_layer(tree)),
                   ({"name": "b/layer.tar", "type": tarfile.LNKTYPE, "linkname": "a/layer.tar"}, None),
                   ({"name": "manifest.json"}, manifest_for("b/layer.tar"))])
    digest = image(state, "import", tb).stdout.decode().strip()
    status, doc, err = run_on(state, digest, "cat /etc/marker")
    assert status == 0 and doc["stdout"] == "tiny image\n", err


# ------------------------------------------------ 3. sparse entries, 4. empty

def test_a_sparse_entry_counts_its_apparent_size(store, tmp_path):
    """A small tarball holding a sparse file: its holes count against the cap."""
    state, _, tree = store
    src = tmp_path / "sparse"
    src.mkdir()
    with open(src / "big", "wb") as f:
        f.truncate(1 << 30)
        f.write(b"start")
    layer = tmp_path / "sparse-layer.tar"
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(layer), "-C", str(src), "big"], check=True)
    # the ingredient: a 1 GiB file in a tarball of a few KiB
    with tarfile.open(layer) as t:
        m = t.getmember("big")
        assert m.issparse() and m.size == 1 << 30
    assert layer.stat().st_size < 64 << 10
    tb = tmp_path / "sparse.tar"
    docker_save(tb, [tree_layer(tree), layer.read_bytes()])
    env = dict(os.environ, AIRLOCK_IMPORT_MAX_BYTES=str(256 << 20))
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "import", str(tb)], capture_output=True, env=env, timeout=300)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"more than 268435456 bytes of content" in p.stderr and b"sparse" in p.stderr, p.stderr
    assert_nothing_stored(state)


def test_a_sparse_entry_under_the_cap_keeps_its_size(store, tmp_path):
    state, _, tree = store
    src = tmp_path / "sparse"
    src.mkdir()
    with open(src / "holes", "wb") as f:
        f.write(b"head")
        f.seek(1 << 20)
        f.write(b"tail")
        f.truncate(2 << 20)               # a trailing hole too
    layer = tmp_path / "sparse-layer.tar"
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(layer), "-C", str(src), "holes"], check=True)
    docker_save(tmp_path / "s.tar", [tree_layer(tree), layer.read_bytes()])
    digest = image(state, "import", tmp_path / "s.tar").stdout.decode().strip()
    stored = stored_tree(state, digest) / "holes"
    assert stored.read_bytes() == (src / "holes").read_bytes()


@pytest.mark.parametrize("layer", ["no_entries", "only_the_root"])
def test_an_empty_image_is_a_clear_refusal(store, tmp_path, layer):
    state, _, _ = store
    entries = [] if layer == "no_entries" else [({"name": "./", "type": tarfile.DIRTYPE}, None)]
    tb = tmp_path / "empty.tar"
    docker_save(tb, [tar_bytes(entries)])
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"the image holds no files" in p.stderr, p.stderr
    assert_nothing_stored(state)


# ------------------------------------ 5. image build on a fresh machine

def tiny_recipe(where: Path, tree: Path):
    where.mkdir(parents=True)
    (where / "build.sh").write_text(f'#!/bin/sh\nset -eu\ncp -a "{tree}" "$1"\necho "image: step 1/1: copied"\n')
    return where


def test_build_makes_a_missing_state_directory(store, tmp_path):
    _, recipe, _ = store
    fresh = tmp_path / "fresh" / "state"
    assert not fresh.parent.exists()
    p = image(fresh, "build", "--recipe", recipe, check=False)
    assert p.returncode == 0, p.stderr
    assert b"No such file or directory" not in p.stderr
    digest = p.stdout.decode().strip()
    assert (fresh / "images" / ("sha256-" + digest[7:]) / "rootfs/etc/marker").exists()
    # made with safe modes: the state directory (and what was missing above it) is root's alone
    assert fresh.stat().st_mode & 0o777 == 0o700
    assert fresh.parent.stat().st_mode & 0o777 == 0o700


def test_import_makes_a_missing_state_directory(store, tmp_path):
    _, _, tree = store
    tb = tmp_path / "app.tar"
    docker_save(tb, [tree_layer(tree)])
    fresh = tmp_path / "fresh2" / "state"
    p = image(fresh, "import", tb, check=False)
    assert p.returncode == 0, p.stderr
    assert fresh.stat().st_mode & 0o777 == 0o700


def installed_copy(prefix: Path):
    (prefix / "bin").mkdir(parents=True)
    shutil.copy2(AIRLOCK, prefix / "bin" / "airlock")
    return prefix / "bin" / "airlock"


def test_an_installed_binary_finds_the_recipe_under_its_prefix(store, tmp_path):
    state, _, tree = store
    prefix = tmp_path / "prefix"
    binary = installed_copy(prefix)
    tiny_recipe(prefix / "share/airlock/image/default", tree)
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_RECIPES"}
    p = subprocess.run([str(binary), "image", "--state", str(state), "build", "--alias", "tiny"],
                       capture_output=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert str(prefix / "share/airlock/image/default").encode() in p.stderr   # "image: building <recipe> ..."


def test_a_missing_recipe_says_where_it_looked(tmp_path):
    prefix = tmp_path / "bare"
    binary = installed_copy(prefix)
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_RECIPES"}
    p = subprocess.run([str(binary), "image", "--state", str(tmp_path / "state"), "build"],
                       capture_output=True, env=env, timeout=60)
    assert p.returncode == 125
    assert b"looked in" in p.stderr, p.stderr
    for where in (prefix / "share/airlock/image/default", Path("/usr/share/airlock/image/default")):
        assert str(where).encode() in p.stderr, p.stderr


@pytest.mark.parametrize("args", [["build", "--help"], ["build", "-h"], ["--help"], ["build", "--bogus"], ["build", "--recipe"]])
def test_build_help_and_typos_never_start_a_build(tmp_path, args):
    """`image build --help` (or a typo) must not start a build: the default one takes minutes."""
    ran = tmp_path / "recipe-ran"
    recipes = tmp_path / "recipes"
    (recipes / "default").mkdir(parents=True)
    (recipes / "default/build.sh").write_text(f'#!/bin/sh\ntouch "{ran}"\nexit 1\n')
    env = dict(os.environ, AIRLOCK_RECIPES=str(recipes))
    (tmp_path / "state").mkdir()
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(tmp_path / "state"), *args],
                       capture_output=True, env=env, timeout=60)
    assert not ran.exists(), "the recipe ran"
    if "--bogus" in args or args[-1] == "--recipe":
        assert p.returncode == 125 and b"usage: airlock image" in p.stderr, p
    else:
        assert p.returncode == 0 and p.stdout.startswith(b"usage: airlock image"), p


# -------------------------------------------------- the rest of the class

def test_a_long_escaped_path_is_wholly_in_the_digest(store, tmp_path):
    """A path whose escaped form is longer than a fixed line buffer: its file's
    hash must still be in the manifest, so a change to it is not 'intact'."""
    state, _, tree = store
    deep = tree / "/".join(["\\" * 250] * 15)      # 3.7 KiB of backslashes, each escaped to 4 characters
    deep.mkdir(parents=True)
    (deep / "f").write_text("one\n")
    digest = import_tree(state, tmp_path, tree, "a.tar")
    (deep / "f").write_text("two\n")
    other = import_tree(state, tmp_path, tree, "b.tar")
    assert other != digest, "two trees that differ in one file's content are one image"
    # and verify sees a change made in the store
    stored = stored_tree(state, digest) / deep.relative_to(tree) / "f"
    assert stored.read_text() == "one\n"
    stored.write_text("changed\n")
    p = image(state, "verify", digest, check=False)
    assert p.returncode == 1 and b"CHANGED" in p.stdout, (p.stdout, p.stderr)


def test_a_deep_entry_is_refused_at_the_entry(store, tmp_path):
    state, _, tree = store
    name = "/".join(["d"] * 200) + "/f"
    tb = tmp_path / "deep.tar"
    docker_save(tb, [tree_layer(tree), tar_bytes([({"name": name}, b"x")])])
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125 and b"refused entry" in p.stderr and b"deeper than 64 levels" in p.stderr, p.stderr
    assert_nothing_stored(state)


def test_hard_links_count_their_file_s_size(store, tmp_path):
    """Every name of a file is hashed (and may be staged) at its size: N hard
    links to a big file are N times the work, and count so."""
    state, _, tree = store
    big = b"\0" * (1 << 20)
    entries = [({"name": "big"}, big)]
    entries += [({"name": f"l{i}", "type": tarfile.LNKTYPE, "linkname": "big"}, None) for i in range(300)]
    layer = tar_bytes([(dict(f), d) for f, d in entries])
    # the ingredient: 301 names of a 1 MiB file, in a layer of about 1 MiB
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        assert sum(m.islnk() for m in t.getmembers()) == 300
    assert len(layer) < 2 << 20
    tb = tmp_path / "links.tar"
    docker_save(tb, [tree_layer(tree), layer])
    env = dict(os.environ, AIRLOCK_IMPORT_MAX_BYTES=str(128 << 20))
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "import", str(tb)], capture_output=True, env=env, timeout=300)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"more than 134217728 bytes of content" in p.stderr and b"hard link" in p.stderr, p.stderr
    # under the cap, the same links are imported as links
    docker_save(tb, [tree_layer(tree), tar_bytes([(dict(f), d) for f, d in entries[:4]])])
    digest = image(state, "import", tb).stdout.decode().strip()
    root = stored_tree(state, digest)
    assert os.stat(root / "l0").st_ino == os.stat(root / "big").st_ino


def test_a_built_tree_s_holds_file_is_read_beneath_it(store, tmp_path, canary):
    """usr/share/airlock/manifest.json (what `image ls` shows an image holds)
    a link to a host file: not followed."""
    state, recipe, tree = store
    path, secret = canary
    path.write_text(json.dumps({"python": {"version": secret}}))
    (tree / "usr/share/airlock").mkdir(parents=True)
    os.symlink(str(path), tree / "usr/share/airlock/manifest.json")
    p = image(state, "build", "--recipe", recipe)
    digest = p.stdout.decode().strip()
    assert os.readlink(stored_tree(state, digest) / "usr/share/airlock/manifest.json") == str(path)
    listing = image(state, "ls", "--json").stdout + image(state, "ls").stdout
    assert secret.encode() not in listing


@pytest.mark.parametrize("fmt", ["pax", "gnu", "gzip"])
def test_layers_out_of_order_long_names_and_gzip(store, tmp_path, fmt):
    """Layers named long (pax and GNU long-name headers), stored in the
    tarball in the reverse of their order, in a plain or gzip'd tarball:
    each read straight from its entry, the later layer still on top."""
    import gzip
    state, _, tree = store
    top = tar_bytes([({"name": "etc/marker"}, b"layer two\n")])
    names = ["l" * 150 + "/one.tar", "m" * 150 + "/two.tar"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT if fmt == "gnu" else tarfile.PAX_FORMAT) as t:
        for name, data in ((names[1], top), (names[0], tree_layer(tree)), ("manifest.json", manifest_for(*names))):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    data = gzip.compress(buf.getvalue()) if fmt == "gzip" else buf.getvalue()
    tb = tmp_path / "order.tar"
    tb.write_bytes(data)
    digest = image(state, "import", tb).stdout.decode().strip()
    status, doc, err = run_on(state, digest, "cat /etc/marker")
    assert status == 0 and doc["stdout"] == "layer two\n", err
    assert [e.name for e in (state / "images").iterdir() if e.name.startswith(".")] == []


def test_store_files_are_not_followed(store, tmp_path, canary):
    """The store's own files (aliases, info.json) replaced by links to host
    files: not read through (and an alias is a name, never a path)."""
    state, recipe, _ = store
    path, secret = canary
    digest = image(state, "build", "--recipe", recipe, "--alias", "tiny").stdout.decode().strip()
    info = state / "images" / ("sha256-" + digest[7:]) / "info.json"
    path.write_text(json.dumps({"holds": {"python": {"version": secret}}}))
    info.unlink()
    os.symlink(str(path), info)
    listing = image(state, "ls", "--json").stdout + image(state, "ls").stdout
    assert secret.encode() not in listing
    assert digest.encode() in listing                  # still listed, from its directory's name
    # an alias that is a path is refused, and writes nothing outside aliases/
    outside = tmp_path / "escaped"
    tb = tmp_path / "app.tar"
    docker_save(tb, [tree_layer(store[2])])
    p = image(state, "import", tb, "--alias", f"../../../{outside.name}", check=False)
    assert p.returncode == 125 and b"bad alias" in p.stderr, p.stderr
    assert not list(tmp_path.glob("escaped*"))


@pytest.mark.parametrize("tree", ["empty", "none"])
def test_a_recipe_that_makes_no_files_is_a_clear_refusal(tmp_path, tree):
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "build.sh").write_text('#!/bin/sh\nmkdir -p "$1"\n' if tree == "empty" else "#!/bin/sh\ntrue\n")
    state = tmp_path / "state"
    state.mkdir()
    p = image(state, "build", "--recipe", recipe, check=False)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"nothing was stored" in p.stderr and (b"holds no files" in p.stderr or b"no tree" in p.stderr), p.stderr
    assert [e.name for e in (state / "images").iterdir() if e.name != "aliases"] == []


@pytest.mark.parametrize("which", ["layer", "manifest", "docker_blob"])
def test_a_blob_must_hold_what_its_digest_names(store, tmp_path, which):
    """blobs/sha256/<hex> is content-addressed: a blob whose bytes are not
    that hash (a tampered or swapped layer) is refused."""
    import hashlib
    state, _, tree = store
    layer = tree_layer(tree)
    other = tar_bytes([({"name": "etc/marker"}, b"swapped\n")])
    ld = hashlib.sha256(layer).hexdigest()
    man = json.dumps({"schemaVersion": 2, "layers": [{"digest": f"sha256:{ld}"}]}).encode()
    md = hashlib.sha256(man).hexdigest()
    if which == "manifest":
        man = json.dumps({"schemaVersion": 2, "layers": [{"digest": f"sha256:{ld}"}], "x": 1}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{"digest": f"sha256:{md}"}]}).encode()
    tb = tmp_path / "blob.tar"
    if which == "docker_blob":
        outer_tar(tb, [({"name": f"blobs/sha256/{ld}"}, other), ({"name": "manifest.json"}, manifest_for(f"blobs/sha256/{ld}"))])
        bad = f"blobs/sha256/{ld}"
    else:
        outer_tar(tb, [({"name": "index.json"}, index), ({"name": f"blobs/sha256/{md}"}, man),
                       ({"name": f"blobs/sha256/{ld}"}, other if which == "layer" else layer)])
        bad = f"blobs/sha256/{md if which == 'manifest' else ld}"
    # the ingredient: the blob really is not what its name says
    with tarfile.open(tb) as t:
        assert hashlib.sha256(t.extractfile(bad).read()).hexdigest() != bad.rsplit("/", 1)[1]
    p = image(state, "import", tb, check=False)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert f"{bad} in the tarball does not hold what its name says".encode() in p.stderr, p.stderr
    assert_nothing_stored(state)


@pytest.mark.parametrize("gz", [False, True])
def test_import_from_a_pipe(store, tmp_path, gz):
    """`docker save | airlock image import /dev/stdin`: a pipe is read once."""
    import gzip
    state, _, tree = store
    tb = tmp_path / "app.tar"
    docker_save(tb, [tree_layer(tree)])
    data = gzip.compress(tb.read_bytes()) if gz else tb.read_bytes()
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "import", "/dev/stdin"],
                       input=data, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == image(state, "import", tb).stdout.decode().strip()
    p = subprocess.run([str(AIRLOCK), "image", "--state", str(state), "import", "/dev/null"], capture_output=True, timeout=60)
    assert p.returncode == 125 and b"not a file or a pipe" in p.stderr, p.stderr
