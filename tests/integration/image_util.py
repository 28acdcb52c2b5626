"""The bundled runtime images for tests that need them (test_image_default.py,
test_image_bookworm.py, test_skills.py): a real build from image/NAME with
debootstrap, cached between runs on the same machine in
AIRLOCK_TEST_IMAGE_STATE (by default /var/cache/airlock-tests/state), keyed
by the recipe's hash, so each is built once. A clean machine builds an image
on its first use, which takes a few minutes."""
import hashlib
import json
import os
import subprocess
from pathlib import Path

from conftest import AIRLOCK, ROOT, need

CACHE = Path(os.environ.get("AIRLOCK_TEST_IMAGE_STATE", "/var/cache/airlock-tests/state"))


def image_cmd(*args, timeout=60):
    return subprocess.run([str(AIRLOCK), "image", "--state", str(CACHE), *map(str, args)],
                          capture_output=True, timeout=timeout)


def recipe_sha256(name):
    """The recipe's hash as airlock computes it (info.json's recipe_sha256):
    its regular files, links followed (build.sh is a link to image/build.sh),
    by name."""
    recipe = ROOT / "image" / name
    h = hashlib.sha256()
    for f in sorted(os.listdir(recipe)):
        p = recipe / f
        if p.is_file():
            h.update(f.encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


def _cached(listing, name):
    """An image NAME built from the current recipe files is reused."""
    want = recipe_sha256(name)
    return any(name in e.get("aliases", []) and e.get("recipe_sha256") == want for e in listing)


def ensure_image(name):
    """The listing entry of the bundled image NAME (default, bookworm),
    built first when the cache lacks one of the current recipe."""
    need(Path("/usr/sbin/debootstrap").exists(), "debootstrap is not installed (scripts/deps.sh installs it)")
    CACHE.mkdir(parents=True, exist_ok=True)
    listing = json.loads(image_cmd("ls", "--json").stdout or b"[]")
    p = image_cmd("build", name, timeout=1800) if not _cached(listing, name) else None
    if p is not None:
        assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    listing = json.loads(image_cmd("ls", "--json").stdout)
    return next(e for e in listing if name in e["aliases"])


def ensure_default_image():
    return ensure_image("default")


def box(code, lang="python", *extra, out=None, image="default"):
    """`airlock run --json --image IMAGE` of CODE: (exit status, its document)."""
    args = [str(AIRLOCK), "run", "--json", "--image", image, "--lang", lang, "--timeout", "120", "--memory", "1G"]
    if out:
        args += ["--out", str(out)]
    p = subprocess.run([*args, *extra, "-c", code], capture_output=True, timeout=300,
                       env=dict(os.environ, AIRLOCK_STATE=str(CACHE)))
    return p.returncode, json.loads(p.stdout) if p.stdout else {"stderr": p.stderr.decode(errors="replace")}


def python_start(image="default"):
    """What a box's `python3 -c pass` imports at its start (-X importtime's
    module names), and whether sitecustomize's byte code is hash-checked,
    so that the read-only image never recompiles it."""
    code = ("import subprocess, sys, sitecustomize\n"
            "e = subprocess.run([sys.executable, '-X', 'importtime', '-c', 'pass'], capture_output=True, text=True)\n"
            "print(' '.join(l.split('|')[2].strip() for l in e.stderr.splitlines() if l.startswith('import time:') and '[us]' not in l))\n"
            "data = open(sitecustomize.__cached__, 'rb').read()\n"
            "print(int.from_bytes(data[4:8], 'little') & 1)\n")
    status, doc = box(code, image=image)
    assert status == 0, doc
    names, hashed = doc["stdout"].splitlines()
    return set(names.split()), hashed == "1"


def stored_manifest(entry):
    """The lines of the store's manifest of an image (path type mode size ...)."""
    d = CACHE / "images" / ("sha256-" + entry["digest"][7:])
    return (d / "manifest").read_text().splitlines()


def setuid_paths(entry):
    """Every path of the image with a setuid or setgid bit, from its manifest."""
    return [ln.split(" ")[0] for ln in stored_manifest(entry) if int(ln.split(" ")[2], 8) & 0o6000]


VERSIONS = ("import json, platform, importlib.metadata as md\n"
            "print(json.dumps({'python': platform.python_version(),"
            " 'libraries': {d: md.version(d) for d in DISTS}}))\n")


def versions_in_box(entry, image):
    """What the image's Python, its libraries and Node say of themselves in
    a box on it: the versions its manifest records must be the tree's."""
    dists = sorted(entry["holds"]["python"]["libraries"])
    status, doc = box(VERSIONS.replace("DISTS", repr(dists)), image=image)
    assert status == 0, doc
    got = json.loads(doc["stdout"])
    status, doc = box("console.log(process.versions.node)", "node", image=image)
    assert status == 0, doc
    got["node"] = doc["stdout"].strip()
    return got


def recorded_versions(entry):
    """The same versions as the image's manifest records them."""
    h = entry["holds"]
    return {"python": h["python"]["version"], "node": h["node"]["version"],
            "libraries": {d: v["version"] for d, v in h["python"]["libraries"].items()}}


def images_state(tmp_path):
    """A state directory for a real `airlock serve` that shares the cached images."""
    state = tmp_path / "svc"
    state.mkdir()
    (state / "images").symlink_to(CACHE / "images")
    return state
