"""The chart's SERVER, driving the API double (kubernetes pass, serial): the
config `helm template deploy/helm/airlock` renders, on an images directory
of reference entries (scripts/server-image.sh's staging: each exported box
image's info.json, manifest and oci.json, no rootfs), answers /healthz and
runs a script through the double as a pod, its output and an /out artifact
returned; the native driver refuses such an entry by name.

The server image itself (`make server-image`: image/server's tree, 41-52 s
here with a network Debian mirror, then `airlock image export --user
10001`, 3 s) is taken from the cache of an earlier build
(/var/cache/airlock-tests/server-image, keyed by the recipe, the binaries
and the box images it carries) or built, once per machine and change
(AIRLOCK_TEST_SERVER_IMAGE=0: never built, the test skipped without a
cached one); then it is pushed to the
session's registry, pulled by digest into the test dockerd and run there as
uid 10001, read-only root, no capability, host network (the test dockerd
has no bridge), with the rendered config and a kubeconfig for the double:
/healthz, and a run through its REST API as a pod of the double. That is
the chart's server as a container: the closest to a deployment this
machine allows."""
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

import kube_pass
import service_util
from conftest import AIRLOCK, ROOT, need


SERVER_CACHE = Path(os.environ.get("AIRLOCK_TEST_SERVER_IMAGE_CACHE", "/var/cache/airlock-tests/server-image"))
SERVER_REPO = "airlock/airlock-server"
# what the /out artifact and the output say: made in the pod, read back through the server
SCRIPT = ("import os\n"
          "open('/out/made-in-pod.txt', 'w').write('pod ' + os.uname().nodename + '\\n')\n"
          "print('hello from', os.getuid())\n")


def rendered(values):
    """The objects `helm template` renders the chart with VALUES (a dict,
    written as a values file): helm test's hook pods included."""
    import kube_util
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values, f)
        f.flush()
        p = subprocess.run([str(kube_util.HELM), "template", "airlock", str(ROOT / "deploy" / "helm" / "airlock"),
                            "-f", f.name], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return [o for o in yaml.safe_load_all(p.stdout) if o]


def rendered_config(values):
    """The ConfigMap's airlock.conf as the chart renders it with VALUES."""
    maps = [o for o in rendered(values) if o["kind"] == "ConfigMap"]
    assert len(maps) == 1, maps
    return maps[0]["data"]["airlock.conf"]


def chart_values(kube, registry, port, image=None):
    """The test's values: the double's namespace, the session's registry,
    a free port, the double's kubeconfig (server.extraConfig), the smoke
    test at start off (its three pods are test_kube_smoke's)."""
    repo, digest = image or ("127.0.0.1:1/airlock/airlock-server", "sha256:" + "0" * 64)
    return {"driver": "kubernetes", "replicaCount": 1, "image": {"repository": repo, "digest": digest},
            "server": {"port": port, "extraConfig": {"kubeconfig": kube.kubeconfig, "kubernetes_smoke": "false",
                                                     "stop_grace_s": "0"}},
            "kubernetes": {"namespace": kube.namespace, "registry": registry}}


def stage(box_images, dest):
    """scripts/server-image.sh's staging (STAGE=DIR): the binaries and the
    box images' reference entries, as the server image carries them."""
    build = Path(AIRLOCK).parent
    p = subprocess.run(["sh", str(ROOT / "scripts" / "server-image.sh")], capture_output=True, timeout=60,
                       env=dict(os.environ, STAGE=str(dest), BUILD=str(build), BOX_IMAGES=str(box_images)))
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return dest / "usr" / "share" / "airlock" / "images"


def call(port, method, path, key=None, body=None, timeout=200):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Authorization": f"Bearer {key}"} if key else {}
        if body is not None:
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        r = conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if "json" in (r.getheader("content-type") or "") else raw)
    finally:
        conn.close()


def wait_healthz(port, alive, within=30):
    deadline = time.monotonic() + within
    while True:
        try:
            status, doc = call(port, "GET", "/healthz", timeout=2)
            if status == 200:
                return doc
        except OSError:
            pass
        assert alive(), "the server exited before /healthz answered"
        assert time.monotonic() < deadline, f"/healthz did not answer in {within} s"
        time.sleep(0.1)


def pod_creates(kube):
    """The Pod creates the double saw, each with its query."""
    reqs = kube.requests()
    reqs = reqs.get("requests", reqs) if isinstance(reqs, dict) else reqs
    return [r for r in reqs if r["method"] == "POST" and r["path"].endswith("/pods")]


def run_through_double(port, key, kube):
    """A run on the default image through the server's REST API: it goes
    through the double as a pod (created under Strict validation), and its
    output and /out come back."""
    before = len(pod_creates(kube))
    status, run = call(port, "POST", "/v1/runs?wait=true", key=key, body={"language": "python", "code": SCRIPT})
    assert status == 200, (status, run)
    assert run["state"] == "succeeded", run
    assert "hello from 65534" in run["result"]["stdout"], run
    arts = [a for a in run["artifacts"] if str(a.get("name", a.get("path", ""))).endswith("made-in-pod.txt")]
    assert len(arts) == 1, run
    status, body = call(port, "GET", f"/v1/artifacts/{arts[0]['id']}/content", key=key)
    assert status == 200 and body.startswith(b"pod "), (status, body)
    creates = pod_creates(kube)[before:]
    assert len(creates) == 1 and creates[0]["query"].get("fieldValidation") in ("Strict", ["Strict"]), creates
    return run


def test_reference_entries_serve_through_the_double(tmp_path):
    """A host `airlock serve` on the chart's rendered config and an images
    directory of reference entries only: the kubernetes driver runs the
    default image by its registry digest; no rootfs is there to read."""
    from image_util import CACHE
    kube, _, registry = kube_pass.cluster()
    images = stage(CACHE / "images", tmp_path / "files")
    assert not list(images.glob("sha256-*/rootfs")), "a reference entry carries no tree"
    entry = (images / "aliases" / "default").read_text().strip()
    assert sorted(p.name for p in (images / ("sha256-" + entry[7:])).iterdir()) == ["info.json", "manifest", "oci.json"]
    port = service_util.free_port()
    conf = rendered_config(chart_values(kube, registry, port))
    assert "images = /usr/share/airlock/images\n" in conf
    state = tmp_path / "state"
    state.mkdir()
    # the chart's paths made the test's: the state and the images directory
    conf = conf.replace("state = /var/lib/airlock\n", f"state = {state}\n") \
               .replace("images = /usr/share/airlock/images\n", f"images = {images}\n") \
               .replace("listen = 0.0.0.0:", "listen = 127.0.0.1:")
    cfg = tmp_path / "airlock.conf"
    cfg.write_text(conf)
    p = subprocess.run([str(AIRLOCK), "admin", "--state", str(state), "bootstrap"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    key = next(w for w in p.stdout.decode().split() if w.startswith("al_"))
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([str(AIRLOCK), "serve", "--config", str(cfg)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_healthz(port, lambda: proc.poll() is None)
        run_through_double(port, key, kube)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_a_tree_driver_refuses_a_reference_entry(tmp_path):
    """The native driver needs the tree: a reference entry is refused with
    the reason, not "no image"; the CLI's kubernetes driver runs it."""
    from image_util import CACHE
    images = stage(CACHE / "images", tmp_path / "files")
    p = subprocess.run([str(AIRLOCK), "run", "--image", "default", "--lang", "python", "-c", "print(1)"], capture_output=True, timeout=60,
                       env=dict(os.environ, AIRLOCK_IMAGES=str(images)))
    assert p.returncode != 0
    err = p.stderr.decode(errors="replace")
    assert "is a reference entry" in err and "runs the image's tree" in err, err
    # `airlock run --driver kubernetes` runs it (by oci.json's digest)
    dargs, env = kube_pass.run_args()
    p = subprocess.run([str(AIRLOCK), "run", "--json", *dargs, "--image", "default", "--lang", "python", "-c",
                        "print('by reference')"], capture_output=True, timeout=180,
                       env=dict(os.environ, **env, AIRLOCK_IMAGES=str(images)))
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert json.loads(p.stdout)["stdout"] == "by reference\n", p.stdout


def test_export_user_is_checked():
    """`airlock image export --user`: a uid, never root (a refused value
    writes nothing)."""
    for bad in ("0", "abc", "-5", "4294967296"):
        p = subprocess.run([str(AIRLOCK), "image", "export", "default", "--out", "/nonexistent/x", "--user", bad],
                           capture_output=True, timeout=30)
        assert p.returncode == 125 and b"--user wants a uid from 1 to 2147483647" in p.stderr, (bad, p.stderr)


def _cache_key(box_images):
    """The server image's cache key: the recipe's files, the binaries, and
    the box images it carries (their oci.json)."""
    h = hashlib.sha256()
    files = sorted((ROOT / "image" / "server").iterdir()) + [ROOT / "scripts" / "server-image.sh"]
    build = Path(AIRLOCK).parent
    files += [build / "airlock", build / "airlock-server"]
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    # (oci.json's exported_at changes with every export; its digest does not)
    for f in sorted(box_images.glob("sha256-*/oci.json")):
        h.update(f.parent.name.encode() + json.loads(f.read_text())["manifest_digest"].encode())
    return h.hexdigest()[:24]


def server_image(box_images):
    """(OCI layout dir, manifest digest) of the server image, from the
    cache, or built unless AIRLOCK_TEST_SERVER_IMAGE=0 (then None)."""
    key = _cache_key(box_images)
    d = SERVER_CACHE / key
    if (d / "digest").exists():
        return d / "oci", (d / "digest").read_text().strip()
    if os.environ.get("AIRLOCK_TEST_SERVER_IMAGE") == "0":
        return None
    need(Path("/usr/sbin/debootstrap").exists(), "debootstrap is not installed (scripts/deps.sh installs it)")
    # one build kept: an earlier key's goes
    shutil.rmtree(SERVER_CACHE, ignore_errors=True)
    d.mkdir(parents=True)
    t0 = time.monotonic()
    p = subprocess.run(["sh", str(ROOT / "scripts" / "server-image.sh")], capture_output=True, timeout=900,
                       env=dict(os.environ, STATE=str(d / "state"), BUILD=str(Path(AIRLOCK).parent),
                                BOX_IMAGES=str(box_images), OUT=str(d / "oci")))
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    digest = json.loads(p.stdout)["digest"]
    print(f"server image built in {time.monotonic() - t0:.1f} s: {digest}")
    # what the tree holds, from its manifest (path type mode ...): the two
    # binaries, the box images' reference entries and no setuid/setgid bit
    entry = json.loads(p.stdout)["image"]
    lines = (d / "state" / "images" / ("sha256-" + entry[7:]) / "manifest").read_text().splitlines()
    paths = {ln.split(" ")[0]: ln.split(" ") for ln in lines}
    assert {"/usr/bin/airlock", "/usr/bin/airlock-server", "/usr/share/airlock/images/aliases/default"} <= set(paths)
    assert not [k for k, v in paths.items() if int(v[2], 8) & 0o6000], "setuid/setgid paths in the server image"
    assert not [k for k in paths if k.startswith("/usr/share/airlock/images/") and k.endswith("/rootfs")]
    assert "/usr/bin/apt" not in paths and "/usr/bin/dpkg" not in paths
    # the state directory is the server user's (a docker run without a volume)
    st = os.stat(d / "state" / "images" / ("sha256-" + entry[7:]) / "rootfs" / "var" / "lib" / "airlock")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (10001, 10001, 0o700), st
    # (the tree is not needed again: the OCI layout is what is pushed)
    shutil.rmtree(d / "state")
    (d / "digest").write_text(digest + "\n")
    return d / "oci", digest


def test_the_server_image_runs_the_chart_server(tmp_path):
    import docker_util
    from image_util import CACHE
    kube, reg, registry = kube_pass.cluster()
    built = server_image(CACHE / "images")
    need(built is not None, "AIRLOCK_TEST_SERVER_IMAGE=0 and no cached server image of these binaries and recipe "
         "(make server-image builds one)")
    layout, digest = built
    config = json.loads((layout / "blobs" / "sha256" / json.loads(
        (layout / "blobs" / "sha256" / digest[7:]).read_text())["config"]["digest"][7:]).read_text())
    assert config["config"]["User"] == "10001", config["config"]
    assert reg.push(f"oci:{layout}", repo=SERVER_REPO) == digest
    ref = reg.ref(digest, repo=SERVER_REPO)
    docker_util.docker("pull", ref, timeout=180)
    port = service_util.free_port()
    values = chart_values(kube, registry, port, image=(f"{reg.host}/{SERVER_REPO}", digest))
    objs = rendered(values)
    conf = rendered_config(values)
    # helm test's pod: its command, arguments and environment as rendered
    smoke = next(o for o in objs if o["kind"] == "Pod" and o["metadata"]["name"].endswith("-smoke"))["spec"]
    smoke = smoke["containers"][0]
    assert smoke["image"] == ref, smoke
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "airlock.conf").write_text(conf)
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 10001, 10001)
    # the chart's pod: uid 10001, read-only root, no capability, no new
    # privileges; its emptyDir state made a directory the test reads the
    # bootstrap key into; the double's kubeconfig (and token file) where
    # the config names them
    kdir = str(Path(kube.kubeconfig).parent)
    base = ["--network", "host", "--user", "10001:10001", "--read-only", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--tmpfs", "/tmp:size=64m",
            "-v", f"{etc}:/etc/airlock:ro", "-v", f"{state}:/var/lib/airlock", "-v", f"{kdir}:{kdir}:ro"]
    for extra in {str(Path(kube.token_file).parent)} - {kdir}:
        base += ["-v", f"{extra}:{extra}:ro"]
    p = docker_util.docker("run", "--rm", *base, "--entrypoint", "airlock", ref, "admin", "--state",
                           "/var/lib/airlock", "bootstrap", timeout=60)
    key = next(w for w in p.stdout.decode().split() if w.startswith("al_"))
    name = f"airlock-server-test-{port}"
    docker_util.docker("run", "-d", "--name", name, *base, "--entrypoint", "airlock", ref, "serve", "--config",
                       "/etc/airlock/airlock.conf", timeout=60)
    try:
        def alive():
            return docker_util.docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == b"true"
        wait_healthz(port, alive)
        top = docker_util.docker("top", name, "-o", "pid,uid,cmd").stdout.decode()
        assert "10001" in top, top
        run_through_double(port, key, kube)
        # `helm test`'s smoke pod's command, in this image: its service
        # account's in-cluster config replaced by the double's kubeconfig;
        # the chart's NetworkPolicy made in the double, as an install makes it
        np = next(o for o in objs if o["kind"] == "NetworkPolicy")
        assert np["metadata"]["namespace"] == kube.namespace, np
        path = f"/apis/networking.k8s.io/v1/namespaces/{kube.namespace}/networkpolicies"
        kube.call("DELETE", f"{path}/{np['metadata']['name']}")
        st, _, body = kube.call("POST", path + "?fieldValidation=Strict", np)
        assert st == 201, (st, body)
        env = [a for e in smoke["env"] for a in ("-e", f"{e['name']}={e['value']}")]
        p = docker_util.docker("run", "--rm", *base, *env, "-e", f"KUBECONFIG={kube.kubeconfig}", "--entrypoint",
                               smoke["command"][0], ref, *smoke["args"], timeout=120, check=False)
        doc = json.loads(p.stdout) if p.stdout.strip().startswith(b"{") else {}
        assert p.returncode == 0 and doc.get("outcome") == "enforced", (p.returncode, p.stdout[-2000:],
                                                                         p.stderr[-2000:])
    finally:
        if "np" in locals():
            kube.call("DELETE", f"{path}/{np['metadata']['name']}")
        logs = docker_util.docker("logs", name, check=False)
        docker_util.docker("rm", "-f", name, check=False)
        print(logs.stderr.decode(errors="replace")[-3000:])
