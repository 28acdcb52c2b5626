"""`airlock run --driver kubernetes --dry-run` (issue 37): the Secret, Pod and
NetworkPolicy a run would be, printed by the real binary with no cluster;
the refusals (the Secret's 1 MiB, paths a Secret cannot carry, an image
never exported, a tag for a digest, a network mode the driver does not
hold); and the kubeconfig reader's errors (a missing file, an exec plugin,
insecure-skip-tls-verify for a server that is not loopback)."""
import base64
import json
import os
import socket
import subprocess

from conftest import ROOT, airlock, need
from test_image import image, tiny_tree

DIGEST = "sha256:" + "ab" * 32
REF = "127.0.0.1:5000/airlock/airlock-box@" + DIGEST


def dry(*args, env=None, input=None):
    e = dict(os.environ if env is None else env)
    e.pop("KUBECONFIG", None)
    e.pop("AIRLOCK_KUBECONFIG", None)
    return airlock("run", "--driver", "kubernetes", "--dry-run", *args, env=e, input=input, timeout=60)


def objects(*args, **kw):
    p = dry(*args, **kw)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


def test_dry_run_prints_hardened_objects(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "x.txt").write_text("hello\n")
    stdin = tmp_path / "stdin.txt"
    stdin.write_bytes(b"in\n")
    doc = objects("--image-ref", REF, "--namespace", "airlock-sandbox", "--runtime-class", "gvisor",
                  "--timeout", "7", "--memory", "128M", "--cpus", "0.25", "--in", data, "--stdin", stdin,
                  "--lang", "python", "-c", "print(1)", "arg1")
    assert set(doc) == {"secret", "pod", "network_policy"}
    sec, pod, np = doc["secret"], doc["pod"], doc["network_policy"]
    name = pod["metadata"]["name"]
    assert name.startswith("airlock-") and len(name) == 24 and int(name[8:], 16) >= 0
    assert sec["metadata"]["name"] == name and pod["metadata"]["namespace"] == "airlock-sandbox"
    for obj in (sec, pod):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "airlock" and labels["airlock.dev/sandbox"] == "true"
        assert labels["airlock.dev/run"] == name and len(labels["airlock.dev/node"]) == 12
        assert int(obj["metadata"]["annotations"]["airlock.dev/deadline"]) > 0
    assert sec["type"] == "Opaque" and sec["immutable"] is True
    assert base64.b64decode(sec["data"]["stdin"]) == b"in\n"
    assert sorted(base64.b64decode(v) for k, v in sec["data"].items() if k != "stdin") == [b"hello\n", b"print(1)"]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 37
    assert spec["terminationGracePeriodSeconds"] == 2 and spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False and spec["runtimeClassName"] == "gvisor"
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                                       "fsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
    hardened = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]}, "privileged": False}
    [main] = spec["containers"]
    [collect] = spec["initContainers"]
    assert main["name"] == "main" and collect["name"] == "collect" and collect["restartPolicy"] == "Always"
    for c in (main, collect):
        assert c["securityContext"] == hardened and c["image"] == REF and c["imagePullPolicy"] == "IfNotPresent"
        assert c["resources"]["limits"] == c["resources"]["requests"]
    assert main["resources"]["limits"] == {"cpu": "250m", "memory": str(128 << 20)}
    assert collect["resources"]["limits"] == {"cpu": "50m", "memory": "32Mi"}
    cmd = main["command"]
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[3:8] == ["airlock-stage", "2", "/airlock/stdin/stdin", "main.py",
                                                         "data"]
    assert cmd[8:] == ["/usr/bin/python3", "main.py", "arg1"]
    # the script is the stage shell's child (never exec'd: a container's PID
    # 1 ignores the signals it sends itself), the shell exits with its status
    assert cmd[2].endswith('exec 3>&2 2>/dev/null; (exec "$@" <"$s" 2>&3 3>&-); exit $?')
    assert main["workingDir"] == "/work"
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert mounts["in"] == {"name": "in", "mountPath": "/airlock/in", "readOnly": True}
    assert mounts["stdin"] == {"name": "stdin", "mountPath": "/airlock/stdin", "readOnly": True}
    assert mounts["work"]["mountPath"] == "/work"
    assert collect["volumeMounts"] == [{"name": "out", "mountPath": "/out", "readOnly": True}]
    vols = {v["name"]: v for v in spec["volumes"]}
    for t in ("work", "out", "tmp"):
        assert vols[t]["emptyDir"] == {"medium": "Memory", "sizeLimit": str(64 << 20)}
    items = vols["in"]["secret"]["items"]
    assert [i["path"] for i in items] == ["main.py", "data/sub/x.txt"]
    assert vols["in"]["secret"]["secretName"] == name and vols["in"]["secret"]["defaultMode"] == 420
    assert vols["stdin"]["secret"]["items"] == [{"key": "stdin", "path": "stdin"}]
    assert np["metadata"] == {"name": "airlock-sandbox-deny-all", "namespace": "airlock-sandbox"}
    assert np["spec"] == {"podSelector": {"matchLabels": {"airlock.dev/sandbox": "true"}},
                          "policyTypes": ["Ingress", "Egress"]}


def test_dry_run_refusals(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * ((1 << 20) - 8))    # with the 8-byte script: 1 MiB
    ok = dry("--image-ref", REF, "--in", big, "--lang", "python", "-c", "print(1)")
    assert ok.returncode == 0, ok.stderr
    big.write_bytes(b"x" * ((1 << 20) - 7))
    p = dry("--image-ref", REF, "--in", big, "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and p.stdout == b""
    assert b'step "provisioning"' in p.stderr
    assert b"(1048577 bytes) exceed what a Kubernetes Secret holds (1 MiB)" in p.stderr
    (tmp_path / "..data").write_text("x")
    p = dry("--image-ref", REF, "--in", tmp_path / "..data", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b'begins with ".."' in p.stderr
    (tmp_path / "tree").mkdir()
    os.symlink("/etc/passwd", tmp_path / "tree" / "link")
    p = dry("--image-ref", REF, "--in", tmp_path / "tree", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b"tree/link is a symbolic link: not followed" in p.stderr
    p = dry("--image-ref", "127.0.0.1:5000/airlock/airlock-box:latest", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b"never a tag" in p.stderr
    p = dry("--image-ref", REF, "--net", "internet", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b"refused by the kubernetes driver: sandbox pods are deny-all" in p.stderr
    p = dry("--image-ref", REF, "--namespace", "Not_A_Label", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b"DNS-1123" in p.stderr
    p = airlock("run", "--dry-run", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b"--driver kubernetes" in p.stderr


def test_dry_run_image_reference(tmp_path):
    """The image's reference is its export's record (oci.json): never
    exported, the dry run says the command to run; exported, it is
    REGISTRY/airlock-box@DIGEST."""
    state = tmp_path / "state"
    state.mkdir()
    tree = tmp_path / "tree"
    tiny_tree(tree)
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "build.sh").write_text(f'#!/bin/sh\nset -eu\ncp -a "{tree}" "$1"\n')
    digest = image(state, "build", "--recipe", recipe, "--alias", "tiny").stdout.decode().split()[-1]
    env = dict(os.environ, AIRLOCK_STATE=str(state))
    p = dry("--image", "tiny", "--registry", "127.0.0.1:5000/airlock", "--lang", "bash", "-c", "true", env=env)
    assert p.returncode == 125 and b"airlock image export tiny --out DIR" in p.stderr, p.stderr
    img_dir = next(d for d in (state / "images").iterdir() if d.name.startswith("sha256-"))
    (img_dir / "oci.json").write_text(json.dumps({"manifest_digest": DIGEST}))
    p = dry("--image", "tiny", "--lang", "bash", "-c", "true", env=env)
    assert p.returncode == 125 and b"--registry" in p.stderr
    doc = objects("--image", "tiny", "--registry", "127.0.0.1:5000/airlock", "--lang", "bash", "-c", "true",
                  env=env)
    assert doc["pod"]["spec"]["containers"][0]["image"] == REF, digest


def kubeconfig(path, user, cluster=None, namespace=None):
    cluster = cluster or {"server": "https://127.0.0.1:6443", "certificate-authority-data":
                          base64.b64encode(b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n").decode()}
    ctx = {"cluster": "c", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    # JSON is YAML: the reader takes both
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "x",
                                "contexts": [{"name": "x", "context": ctx}],
                                "clusters": [{"name": "c", "cluster": cluster}],
                                "users": [{"name": "u", "user": user}]}))
    return path


def test_kubeconfig_read_and_refused(tmp_path):
    args = ("--image-ref", REF, "--lang", "python", "-c", "print(1)")
    # a token file relative to the kubeconfig's directory, its namespace
    (tmp_path / "token").write_text("t0k\n")
    kc = kubeconfig(tmp_path / "config", {"tokenFile": "token"}, namespace="team-a")
    doc = objects("--kubeconfig", kc, *args)
    assert doc["pod"]["metadata"]["namespace"] == "team-a" and doc["network_policy"]["metadata"]["namespace"] == "team-a"
    # --namespace wins over the context's
    assert objects("--kubeconfig", kc, "--namespace", "team-b", *args)["pod"]["metadata"]["namespace"] == "team-b"
    # KUBECONFIG is read when no --kubeconfig
    env = dict(os.environ, AIRLOCK_KUBECONFIG=str(kc))
    p = airlock("run", "--driver", "kubernetes", "--dry-run", *args, env=env)
    assert p.returncode == 0 and json.loads(p.stdout)["pod"]["metadata"]["namespace"] == "team-a"

    p = dry("--kubeconfig", tmp_path / "absent", *args)
    assert p.returncode == 125 and b"No such file or directory" in p.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "exec", {"exec": {"command": "aws", "args": ["eks"]}}), *args)
    assert p.returncode == 125 and b"exec plugin: airlock never runs another program" in p.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "ap", {"auth-provider": {"name": "gcp"}}), *args)
    assert p.returncode == 125 and b"auth-provider plugin" in p.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "insecure", {"token": "t"},
                                       {"server": "https://10.1.2.3:6443", "insecure-skip-tls-verify": True}), *args)
    assert p.returncode == 125 and b"insecure-skip-tls-verify is refused for https://10.1.2.3:6443" in p.stderr
    ok = dry("--kubeconfig", kubeconfig(tmp_path / "insecure-lo", {"token": "t"},
                                        {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}), *args)
    assert ok.returncode == 0, ok.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "plain", {"token": "t"}, {"server": "http://10.1.2.3:8080"}), *args)
    assert p.returncode == 125 and b"plain http:// and not loopback" in p.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "nocred", {}), *args)
    assert p.returncode == 125 and b"no credentials" in p.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "halfcert", {"client-certificate-data": "eA=="}), *args)
    assert p.returncode == 125 and b"without its key" in p.stderr
    p = dry("--kubeconfig", kubeconfig(tmp_path / "badca", {"token": "t"},
                                       {"server": "https://127.0.0.1:1", "certificate-authority-data": "!!"}), *args)
    assert p.returncode == 125 and b"not base64" in p.stderr
    big = tmp_path / "big"
    big.write_text("#" * (1 << 20) + "\n")
    p = dry("--kubeconfig", big, *args)
    assert p.returncode == 125 and b"over 1 MiB" in p.stderr
    (tmp_path / "notyaml").write_text("current-context: [\n")
    p = dry("--kubeconfig", tmp_path / "notyaml", *args)
    assert p.returncode == 125 and b"not YAML" in p.stderr
    (tmp_path / "nocontext").write_text("apiVersion: v1\nkind: Config\ncurrent-context: gone\ncontexts: []\n")
    p = dry("--kubeconfig", tmp_path / "nocontext", *args)
    assert p.returncode == 125 and b'no context named "gone"' in p.stderr


def test_in_cluster_service_account(tmp_path):
    """No kubeconfig: the pod's service account (its token, CA and
    namespace files; KUBERNETES_SERVICE_HOST/PORT), read by the test-hooks
    build from AIRLOCK_TEST_KUBE_SA_DIR. `airlock smoke` then asks that
    server: a closed port here, so the test is inconclusive, named."""
    hooks = ROOT / "build-asan" / "airlock"
    need(hooks.exists(), f"{hooks} (the test-hooks build: make asan) is not built")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token\n")
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    (sa / "namespace").write_text("team-z\n")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "AIRLOCK_KUBECONFIG")}
    env.update(AIRLOCK_TEST_KUBE_SA_DIR=str(sa), KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(port))
    p = subprocess.run([str(hooks), "smoke", "--driver", "kubernetes", "--image-ref", REF, "--timeout", "10"],
                       capture_output=True, timeout=60, env=env)
    doc = json.loads(p.stdout)
    assert p.returncode == 2 and doc["outcome"] == "inconclusive" and doc["namespace"] == "team-z", (doc, p.stderr)
    assert f"https://127.0.0.1:{port}" in doc["reason"] and doc["detail"] == {}, doc
    del env["KUBERNETES_SERVICE_HOST"]
    p = subprocess.run([str(hooks), "smoke", "--driver", "kubernetes", "--image-ref", REF], capture_output=True,
                       timeout=60, env=env)
    assert p.returncode == 125 and b"not in a pod (KUBERNETES_SERVICE_HOST is unset)" in p.stderr
    env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"
    (sa / "token").unlink()
    p = subprocess.run([str(hooks), "smoke", "--driver", "kubernetes", "--image-ref", REF], capture_output=True,
                       timeout=60, env=env)
    assert p.returncode == 125 and b"read the token file" in p.stderr, p.stderr
