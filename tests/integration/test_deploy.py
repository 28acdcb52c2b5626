"""The deploy files (deploy/helm/airlock, deploy/kubernetes) rendered by the
real tools: helm lint --strict, helm template with every values file,
kubectl kustomize of the base and the gVisor overlay. Every rendered object
is validated against the Kubernetes OpenAPI schema (kubernetes-models' ajv
validators, plus tsc --strict on the models' interfaces for unknown fields:
tests/e2e/k8s_validate.mjs). Then the hardening, field by field: the
driver's Role (its verbs exactly), the sandbox namespace's Pod Security
labels, the deny-all NetworkPolicy, the server pod's securityContext, the
image pinned by digest and a tag refused; and helm and kustomize render the
same sandbox objects. Nothing here talks to a cluster (docs/kubernetes.md:
what this proves and what only a real cluster does)."""
import json
import subprocess
from pathlib import Path

import pytest
import yaml

import node_util
from conftest import ROOT, need
from kube_util import HELM, KUBECTL   # the real tools, where scripts/deps.sh unpacks them
CHART = ROOT / "deploy" / "helm" / "airlock"
EXAMPLES = sorted((CHART / "examples").glob("values-*.yaml"))
KUSTOMIZE = {"base": ROOT / "deploy" / "kubernetes" / "base",
             "gvisor": ROOT / "deploy" / "kubernetes" / "overlays" / "gvisor"}
SANDBOX_NS = "airlock-sandbox"
DIGEST = "sha256:4c8d1f8a1e2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"


def tools():
    need(HELM.exists() and KUBECTL.exists(), f"helm at {HELM} and kubectl at {KUBECTL} (scripts/deps.sh unpacks them)")


def run(*args, check=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    if check:
        assert p.returncode == 0, f"{args}: {p.stderr.decode(errors='replace')}"
    return p


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def helm_template(*extra, check=True):
    tools()
    return run(HELM, "template", "airlock", CHART, "--namespace", "airlock", *extra, check=check)


def render(values, *extra):
    return docs(helm_template("-f", values, *extra).stdout)


def kustomize(name):
    tools()
    return docs(run(KUBECTL, "kustomize", KUSTOMIZE[name]).stdout)


def one(objs, kind, name=None, ns=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
             and (ns is None or o["metadata"].get("namespace") == ns)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def example(name):
    return CHART / "examples" / f"values-{name}.yaml"


@pytest.fixture(scope="module")
def rendered():
    out = {f.stem.removeprefix("values-"): render(f) for f in EXAMPLES}
    out.update({f"kustomize-{k}": kustomize(k) for k in KUSTOMIZE})
    return out


def test_helm_lint_strict_with_every_values_file():
    tools()
    assert {f.name for f in EXAMPLES} == {"values-kubernetes.yaml", "values-kubernetes-gvisor.yaml",
                                          "values-docker.yaml"}
    for f in [None, *EXAMPLES]:
        p = run(HELM, "lint", "--strict", CHART, *(["-f", f] if f else []), check=False)
        out = p.stdout.decode() + p.stderr.decode()
        assert p.returncode == 0 and "0 chart(s) failed" in out and "[WARNING]" not in out, out


def test_every_object_validates_against_the_openapi_schema(rendered, tmp_path):
    node_util.npm_ci()
    objs = [o for objs in rendered.values() for o in objs]
    (tmp_path / "objects.json").write_text(json.dumps(objs))
    p = subprocess.run(["node", str(node_util.E2E / "k8s_validate.mjs"), str(tmp_path / "objects.json")],
                       capture_output=True, timeout=60, cwd=node_util.E2E)
    report = json.loads(p.stdout or b"{}")
    assert p.returncode == 0, f"{report or p.stderr.decode()}"
    assert report["objects"] == len(objs) and not report["schema_errors"] and not report["type_errors"]
    kinds = set(report["kinds"])
    assert {"v1/Namespace", "rbac.authorization.k8s.io/v1/Role", "rbac.authorization.k8s.io/v1/RoleBinding",
            "networking.k8s.io/v1/NetworkPolicy", "node.k8s.io/v1/RuntimeClass", "apps/v1/Deployment",
            "policy/v1/PodDisruptionBudget", "v1/Service", "v1/ServiceAccount", "v1/ConfigMap", "v1/Pod"} <= kinds
    # and the validator refuses what a server would: an unknown field, a wrong enum
    dep = json.loads(json.dumps(one(rendered["kubernetes"], "Deployment")))
    dep["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilegd"] = False
    pol = json.loads(json.dumps(one(rendered["kubernetes"], "NetworkPolicy")))
    pol["spec"]["policyTypes"] = ["Ingress", "Outgress"]
    (tmp_path / "bad.json").write_text(json.dumps([dep, pol]))
    p = subprocess.run(["node", str(node_util.E2E / "k8s_validate.mjs"), str(tmp_path / "bad.json")],
                       capture_output=True, timeout=60, cwd=node_util.E2E)
    bad = json.loads(p.stdout)
    assert p.returncode == 1 and "'\"privilegd\"' does not exist" in bad["type_errors"]
    assert any("policyTypes/1 must be equal to one of the allowed values" in e for e in bad["schema_errors"])


ROLE_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "delete", "list"]},
]
PSA = {f"pod-security.kubernetes.io/{m}{s}": v for m in ("enforce", "audit", "warn")
       for s, v in (("", "restricted"), ("-version", "latest"))}


@pytest.mark.parametrize("name", ["kubernetes", "kubernetes-gvisor", "kustomize-base", "kustomize-gvisor"])
def test_the_sandbox_is_locked_down(rendered, name):
    objs = rendered[name]
    ns = one(objs, "Namespace", SANDBOX_NS)
    assert {k: v for k, v in ns["metadata"]["labels"].items() if k.startswith("pod-security")} == PSA
    # the driver's rights: in the sandbox namespace only, these verbs exactly
    role = one(objs, "Role")
    assert role["metadata"]["namespace"] == SANDBOX_NS and role["rules"] == ROLE_RULES
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    rb = one(objs, "RoleBinding")
    assert rb["metadata"]["namespace"] == SANDBOX_NS
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    sa = one(objs, "ServiceAccount")
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "airlock"}]
    # deny-all: both directions, no rule at all, on exactly the label the driver puts on its pods
    pol = one(objs, "NetworkPolicy", "airlock-sandbox-deny-all", SANDBOX_NS)
    assert pol["spec"] == {"podSelector": {"matchLabels": {"airlock.dev/sandbox": "true"}},
                           "policyTypes": ["Ingress", "Egress"]}
    # the server's config names the sandbox
    conf = one(objs, "ConfigMap")["data"]["airlock.conf"]
    assert "driver = kubernetes\n" in conf and f"kubernetes_namespace = {SANDBOX_NS}\n" in conf
    assert "kubernetes_registry = registry.example.com/airlock\n" in conf
    gvisor = name.endswith("gvisor")
    assert ("kubernetes_runtime_class = gvisor\n" in conf) == gvisor
    rcs = [o for o in objs if o["kind"] == "RuntimeClass"]
    if gvisor:
        assert [(r["metadata"]["name"], r["handler"]) for r in rcs] == [("gvisor", "runsc")]
        assert rcs[0]["scheduling"] == {
            "nodeSelector": {"airlock.dev/pool": "sandbox"},
            "tolerations": [{"key": "airlock.dev/sandbox", "operator": "Equal", "value": "true",
                             "effect": "NoSchedule"}]}
    else:
        assert not rcs


@pytest.mark.parametrize("name", ["kubernetes", "kubernetes-gvisor", "docker", "kustomize-base", "kustomize-gvisor"])
def test_the_server_pod_is_hardened_and_pinned(rendered, name):
    objs = rendered[name]
    dep = one(objs, "Deployment")
    spec = dep["spec"]["template"]["spec"]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                       "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not any("hostPath" in v for v in spec["volumes"])
    assert spec["automountServiceAccountToken"] is (name != "docker")
    [c] = spec["containers"]
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "runAsNonRoot": True, "privileged": False, "capabilities": {"drop": ["ALL"]}}
    assert c["image"] == f"registry.example.com/airlock/airlock@{DIGEST}"
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["env"][0] == {"name": "AIRLOCK_STORE",
                           "valueFrom": {"secretKeyRef": {"name": "airlock-postgresql", "key": "dsn"}}}
    assert dep["spec"]["replicas"] == 2
    pdb = one(objs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    svc = one(objs, "Service")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    if name == "docker":
        assert {"name": "DOCKER_HOST", "value": "tcp://dockerd.airlock.svc:2376"} in c["env"]
        assert not [o for o in objs if o["kind"] in ("Namespace", "Role", "RoleBinding", "NetworkPolicy", "Pod")]
        assert "driver = docker\nruntime = runsc\n" in one(objs, "ConfigMap")["data"]["airlock.conf"]


def test_helm_test_runs_the_smoke_test(rendered):
    pod = one(rendered["kubernetes-gvisor"], "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [c] = pod["spec"]["containers"]
    # the runs' image by the digest the export printed
    box = "sha256:19218219f8ab9c982459686f8a8784a8f60dc61c2f799ad1b752f4e023fb8595"
    assert c["command"] + c["args"] == ["airlock", "smoke", "--driver", "kubernetes", "--namespace", SANDBOX_NS,
                                        "--image-ref", f"registry.example.com/airlock/airlock-box@{box}",
                                        "--runtime-class", "gvisor"]
    # without it, from the server image's own images directory, as the server resolves it
    [c] = one(rendered["kubernetes"], "Pod")["spec"]["containers"]
    assert c["args"][5:] == ["--registry", "registry.example.com/airlock"]
    assert c["image"].endswith("@" + DIGEST) and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["serviceAccountName"] == "airlock" and pod["spec"]["restartPolicy"] == "Never"


def test_helm_and_kustomize_render_the_same_sandbox(rendered):
    for helm, kust in (("kubernetes", "kustomize-base"), ("kubernetes-gvisor", "kustomize-gvisor")):
        for kind in ("Namespace", "Role", "RoleBinding", "NetworkPolicy", "RuntimeClass"):
            h = [o for o in rendered[helm] if o["kind"] == kind and o["metadata"].get("name") != "airlock"]
            k = [o for o in rendered[kust] if o["kind"] == kind and o["metadata"].get("name") != "airlock"]
            assert h == k, f"{kind}: helm ({helm}) and kustomize ({kust}) differ:\n{h}\n{k}"
        # the server's config and its pod spec too (less helm's labels and config checksum)
        conf = [one(rendered[x], "ConfigMap")["data"]["airlock.conf"] for x in (helm, kust)]
        strip = [[ln for ln in c.splitlines() if not ln.startswith("#")] for c in conf]
        assert strip[0] == strip[1]
        pods = [one(rendered[x], "Deployment")["spec"]["template"]["spec"] for x in (helm, kust)]
        for p in pods:
            p["volumes"] = [v for v in p["volumes"] if v["name"] != "config"]
        assert pods[0] == pods[1]


@pytest.mark.parametrize("args, message", [
    (["--set", "image.tag=latest"], 'image.tag ("latest") is refused: name the image by digest'),
    (["--set", "image.digest="], "image.digest is required"),
    (["--set", "image.digest=sha256:abc"], 'image.digest ("sha256:abc") is not'),
    (["--set", "image.repository=registry.example.com/airlock/airlock:1.0"], "holds a tag or a digest"),
    (["--set", "driver=native"], "driver native is refused by this chart"),
    (["--set", "driver=lxc"], "at '/driver': value must be one of 'kubernetes', 'docker', 'native', 'disabled'"),
    (["--set", "store.postgresql.existingSecret="], "replicaCount > 1 needs one PostgreSQL store"),
    (["--set", "kubernetes.registry="], "driver kubernetes needs kubernetes.registry"),
    (["--set", "kubernetes.runtimeClass.create=true"], "kubernetes.runtimeClass.create needs kubernetes.runtimeClass.name"),
    (["--set", "kubernetes.seccomp=unconfined"], "kubernetes.seccomp is runtime-default or localhost:PATH"),
    (["--set", "kubernetes.seccomp=localhost:/var/lib/kubelet/seccomp/a.json"], "relative to the kubelet's seccomp root"),
    (["--set", "kubernetes.seccomp=localhost:airlock/../a.json"], "without . or .. components"),
    (["--set", "kubernetes.boxDigest=latest"], 'kubernetes.boxDigest ("latest") is not'),
    # values.schema.json: a misspelt key is an error, not a silent default
    (["--set", "kubernetes.namspace=other"], "additional properties 'namspace' not allowed"),
    (["--set", "replicaCount=0"], "at '/replicaCount': minimum"),
])
def test_the_chart_refuses(args, message):
    p = helm_template("-f", example("kubernetes"), *args, check=False)
    assert p.returncode != 0 and message in p.stderr.decode(), p.stderr.decode()


def test_seccomp_localhost_renders_into_the_config_and_the_smoke_test():
    """kubernetes.seccomp = localhost:PATH: the server's config names it (the
    sandbox pods' seccompProfile Localhost), `helm test`'s smoke pod checks it
    from its sandbox probe, and the chart itself installs no profile (no
    hostPath: the file is the nodes' operator's)."""
    objs = docs(helm_template("-f", example("kubernetes"), "--set",
                              "kubernetes.seccomp=localhost:airlock/airlock.json").stdout)
    conf = one(objs, "ConfigMap")["data"]["airlock.conf"]
    assert "kubernetes_seccomp = localhost:airlock/airlock.json\n" in conf, conf
    [c] = one(objs, "Pod")["spec"]["containers"]
    assert c["args"][-2:] == ["--seccomp", "localhost:airlock/airlock.json"], c["args"]
    assert "hostPath" not in json.dumps(objs)
    # the default: the runtime's, and the smoke test then does not check one
    objs = docs(helm_template("-f", example("kubernetes")).stdout)
    assert "kubernetes_seccomp = runtime-default\n" in one(objs, "ConfigMap")["data"]["airlock.conf"]
    [c] = one(objs, "Pod")["spec"]["containers"]
    assert "--seccomp" not in c["args"]


def test_disabled_and_a_single_replica_on_sqlite_render():
    objs = docs(helm_template("--set", "driver=disabled", "--set", "replicaCount=1", "--set",
                              "image.repository=r.example/airlock", "--set", f"image.digest={DIGEST}").stdout)
    assert "driver = disabled\n" in one(objs, "ConfigMap")["data"]["airlock.conf"]
    dep = one(objs, "Deployment")
    assert "env" not in dep["spec"]["template"]["spec"]["containers"][0]
    assert not [o for o in objs if o["kind"] in ("Namespace", "Role", "NetworkPolicy", "Pod")]
