"""The Kubernetes API double (tests/kube_double) itself: that it is as strict
as a real API server where airlock's driver could go wrong (field
validation, Pod Security restricted, validation), that the real kubectl
1.35.2 reads its objects and gets the real server's errors from it, and that
a pod of the contract's shape (kube_contract.md: STAGE in "main", COLLECT in
the native sidecar "collect") runs for real on the test dockerd: exit code,
merged log, /out as collect's base64 tar, OOMKilled, DeadlineExceeded, the
tmpfs size, read-only root, uid 65534, no capabilities. Driven by plain
HTTP, as the C driver is K-run's; then the faults."""
import base64
import http.client
import io
import json
import re
import socket
import tarfile
import time
import urllib.error

import pytest

import docker_util
import registry_util

# the driver's stage (src/kube/spec.c): $2 is the script's stdin
STAGE = ('n=$1; s=$2; shift 2; cd /airlock/in || exit 126; while [ "$n" -gt 0 ]; do cp -R -L -- "$1" /work/ || '
         'exit 126; shift; n=$((n-1)); done; cd /work || exit 126; exec 3>&2 2>/dev/null; '
         '(exec "$@" <"$s" 2>&3 3>&-); exit $?')
COLLECT = ("trap 'echo airlock-out-begin; cd /out && tar -cf - . | base64; echo \"airlock-out-end $?\"; exit 0' TERM; "
           "echo airlock-collect-ready; while :; do sleep 1 & wait $!; done")
SC = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
      "capabilities": {"drop": ["ALL"]}, "privileged": False}


@pytest.fixture(scope="module")
def kube(kube_double, tmp_path_factory):
    """The session's double, and the tiny test image pushed to its registry."""
    oci = tmp_path_factory.mktemp("oci") / "tiny"
    registry_util.tiny_image(oci)
    kube_double.ref = kube_double.registry.ref(kube_double.registry.push(f"oci:{oci}"))
    kube_double.ns = kube_double.namespace
    yield kube_double
    # every pod this module made is gone, and its containers with it
    deadline = time.monotonic() + 15
    while (kube_double.pods() or docker_util.docker("ps", "-aq", "--filter", f"label=kube-double={kube_double.port}")
           .stdout.strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not kube_double.pods(), kube_double.pods()
    assert not docker_util.docker("ps", "-aq", "--filter", f"label=kube-double={kube_double.port}").stdout.strip()


_n = [0]


def new_name():
    _n[0] += 1
    return f"airlock-{int(time.time() * 1000) % (1 << 40):010x}{_n[0]:06x}"


def objects(kube, name, script, inputs=(), stdin=b"", memory=64 << 20, tmpfs=1 << 20, deadline=60, argv=None,
            labels=None):
    """The contract's Secret and Pod for SCRIPT (stored as main.sh) and INPUTS ((path, bytes), ...)."""
    data = {"f0": script.encode() if isinstance(script, str) else script}
    items = [{"key": "f0", "path": "main.sh"}]
    for i, (p, b) in enumerate(inputs, 1):
        data[f"f{i}"] = b
        items.append({"key": f"f{i}", "path": p})
    data["stdin"] = stdin
    meta = {"name": name, "labels": {"app.kubernetes.io/managed-by": "airlock", "airlock.dev/sandbox": "true",
                                     "airlock.dev/run": name, **(labels or {})},
            "annotations": {"airlock.dev/deadline": str(int(time.time()) + deadline)}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "immutable": True,
              "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    tops = []
    for it in items:
        t = it["path"].split("/")[0]
        if t not in tops:
            tops.append(t)
    res = {"limits": {"cpu": "500m", "memory": str(memory)}, "requests": {"cpu": "500m", "memory": str(memory)}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "restartPolicy": "Never", "activeDeadlineSeconds": deadline, "terminationGracePeriodSeconds": 2,
        "automountServiceAccountToken": False, "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "fsGroup": 65534,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [{"name": v, "emptyDir": {"medium": "Memory", "sizeLimit": str(tmpfs)}} for v in ("work", "out", "tmp")] + [
            {"name": "in", "secret": {"secretName": name, "defaultMode": 420, "items": items}},
            {"name": "stdin", "secret": {"secretName": name, "defaultMode": 420,
                                         "items": [{"key": "stdin", "path": "stdin"}]}}],
        "initContainers": [{
            "name": "collect", "image": kube.ref, "imagePullPolicy": "IfNotPresent", "restartPolicy": "Always",
            "command": ["/bin/sh", "-c", COLLECT], "securityContext": SC,
            "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}, "requests": {"cpu": "50m", "memory": "32Mi"}},
            "volumeMounts": [{"name": "out", "mountPath": "/out", "readOnly": True}]}],
        "containers": [{
            "name": "main", "image": kube.ref, "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", STAGE, "airlock-stage", str(len(tops)), "/airlock/stdin/stdin", *tops,
                        *(argv or ["/bin/sh", "main.sh"])],
            "workingDir": "/work",
            "env": [{"name": "PATH", "value": "/usr/local/bin:/usr/bin:/bin"}, {"name": "HOME", "value": "/work"},
                    {"name": "TMPDIR", "value": "/tmp"}],
            "resources": res, "securityContext": SC,
            "volumeMounts": [{"name": "work", "mountPath": "/work"}, {"name": "out", "mountPath": "/out"},
                             {"name": "tmp", "mountPath": "/tmp"},
                             {"name": "in", "mountPath": "/airlock/in", "readOnly": True},
                             {"name": "stdin", "mountPath": "/airlock/stdin", "readOnly": True}]}]}}
    # each container its own securityContext (a test mutates one)
    return secret, json.loads(json.dumps(pod))


def create(kube, res, obj, strict=True):
    path = f"/api/v1/namespaces/{kube.ns}/{res}" if res != "networkpolicies" else \
        f"/apis/networking.k8s.io/v1/namespaces/{kube.ns}/networkpolicies"
    return kube.call("POST", path + ("?fieldValidation=Strict" if strict else ""), obj)


def delete_pod(kube, name, grace=2):
    return kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/pods/{name}",
                     {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace,
                      "propagationPolicy": "Background"})


def watch(kube, name, rv, until, timeout=60):
    """Watch pod NAME from RV until UNTIL(event) is true; the events seen."""
    seen = []
    w = kube.stream(f"/api/v1/namespaces/{kube.ns}/pods?watch=1&fieldSelector=metadata.name%3D{name}"
                    f"&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds={timeout}", timeout=timeout + 5)
    with w:
        for line in w:
            ev = json.loads(line)
            seen.append(ev)
            if until(ev):
                return seen
    raise AssertionError(f"the watch ended before the condition: {[e['type'] for e in seen]}")


def terminal(ev):
    return ev["type"] == "DELETED" or (ev["object"].get("status") or {}).get("phase") in ("Succeeded", "Failed")


def main_state(pod):
    return next(c["state"] for c in pod["status"]["containerStatuses"] if c["name"] == "main")


def log(kube, name, container, **q):
    qs = "&".join(f"{k}={v}" for k, v in q.items())
    return kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}/log?container={container}&follow=true"
                     + (f"&{qs}" if qs else ""), raw=True)


def out_tar(collect_log):
    lines = collect_log.decode().splitlines()
    assert "airlock-out-begin" in lines and "airlock-out-end 0" in lines, collect_log[-500:]
    b = "".join(lines[lines.index("airlock-out-begin") + 1:lines.index("airlock-out-end 0")])
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(b))) as t:
        return {m.name: (t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()}


def run(kube, script, **kw):
    """Run SCRIPT in the contract's pod: (final pod, main's log, collect's log)."""
    name = new_name()
    secret, pod = objects(kube, name, script, **kw)
    st, _, b = create(kube, "secrets", secret)
    assert st == 201, b
    st, _, p = create(kube, "pods", pod)
    assert st == 201, p
    final = watch(kube, name, p["metadata"]["resourceVersion"], terminal)[-1]["object"]
    main = log(kube, name, "main")[2]
    collect = log(kube, name, "collect")[2]
    assert delete_pod(kube, name)[0] == 200
    assert kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")[0] == 200
    return final, main, collect


# ------------------------------------------------------------ strictness

def test_strict_field_validation(kube):
    name = new_name()
    secret, pod = objects(kube, name, "true")
    pod["spec"]["foo"] = 1
    pod["spec"]["containers"][0]["securityContext"]["bogus"] = True
    st, _, b = create(kube, "pods", pod)
    assert st == 400 and b["reason"] == "BadRequest", b
    # in the document's order, as the server's decoder meets them
    assert b["message"] == ('Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
                            '"spec.containers[0].securityContext.bogus", unknown field "spec.foo"'), b["message"]
    # without Strict (Warn, the server's default): accepted, a Warning header, the field dropped
    st, h, b = kube.call("POST", f"/api/v1/namespaces/{kube.ns}/pods?dryRun=All", pod)
    assert st == 201, b
    assert 'unknown field \\"spec.foo\\"' in " ".join(h.get_all("Warning")), h.get_all("Warning")
    assert "foo" not in b["spec"]
    # a duplicate field is a strict error too
    raw = json.dumps(secret).replace('"type": "Opaque"', '"type": "Opaque", "type": "Opaque"')
    st, _, b = kube.call("POST", f"/api/v1/namespaces/{kube.ns}/secrets?fieldValidation=Strict", raw.encode())
    assert st == 400 and 'strict decoding error: duplicate field "type"' in b["message"], b
    secret["stringDatum"] = {}
    st, _, b = create(kube, "secrets", secret)
    assert b["message"] == ('Secret in version "v1" cannot be handled as a Secret: strict decoding error: '
                            'unknown field "stringDatum"'), b
    np_ = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "x"},
           "spec": {"podSelector": {"matchLabel": {}}, "policyTypes": ["Egress"]}}
    st, _, b = create(kube, "networkpolicies", np_)
    assert st == 400 and 'unknown field "spec.podSelector.matchLabel"' in b["message"], b
    st, _, b = kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/pods/nope",
                         {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriod": 1})
    assert st == 400 and 'unknown field "gracePeriod"' in b["message"], b


RESTRICTED = [
    (lambda s: s["containers"][0]["securityContext"].update(privileged=True),
     'privileged (container "main" must not set securityContext.privileged=true)'),
    (lambda s: s["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
     'allowPrivilegeEscalation != false (container "main" must set securityContext.allowPrivilegeEscalation=false)'),
    (lambda s: s["initContainers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
     'allowPrivilegeEscalation != false (container "collect" must set securityContext.allowPrivilegeEscalation=false)'),
    (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
     'unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"])'),
    (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN", "NET_BIND_SERVICE"]),
     'unrestricted capabilities (container "main" must not include "SYS_ADMIN" in securityContext.capabilities.add)'),
    (lambda s: (s["securityContext"].pop("runAsNonRoot"), s["containers"][0]["securityContext"].pop("runAsNonRoot"),
                s["initContainers"][0]["securityContext"].pop("runAsNonRoot")),
     'runAsNonRoot != true (pod or containers "collect", "main" must set securityContext.runAsNonRoot=true)'),
    (lambda s: s["containers"][0]["securityContext"].update(runAsUser=0),
     'runAsUser=0 (container "main" must not set runAsUser=0)'),
    (lambda s: s["securityContext"].pop("seccompProfile"),
     'seccompProfile (pod or containers "collect", "main" must set securityContext.seccompProfile.type to '
     '"RuntimeDefault" or "Localhost")'),
    (lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")'),
    (lambda s: s.update(hostNetwork=True, hostPID=True),
     "host namespaces (hostNetwork=true, hostPID=true)"),
    (lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/etc"}}),
     'restricted volume types (volume "host" uses restricted volume type "hostPath")'),
]


@pytest.mark.parametrize("case", range(len(RESTRICTED)))
def test_pod_security_restricted(kube, case):
    mutate, reason = RESTRICTED[case]
    name = new_name()
    _, pod = objects(kube, name, "true")
    mutate(pod["spec"])
    st, _, b = create(kube, "pods", pod)
    assert st == 403 and b["reason"] == "Forbidden", b
    assert b["message"] == f'pods "{name}" is forbidden: violates PodSecurity "restricted:latest": {reason}', b["message"]


def test_pod_security_several_in_the_servers_order(kube):
    name = new_name()
    _, pod = objects(kube, name, "true")
    c = pod["spec"]["containers"][0]
    c["securityContext"] = {"privileged": True, "runAsUser": 0}
    pod["spec"]["securityContext"] = {}
    pod["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    st, _, b = create(kube, "pods", pod)
    assert b["message"] == (
        f'pods "{name}" is forbidden: violates PodSecurity "restricted:latest": privileged (container "main" must not '
        'set securityContext.privileged=true), allowPrivilegeEscalation != false (container "main" must set '
        'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "main" must set '
        'securityContext.capabilities.drop=["ALL"]), restricted volume types (volume "h" uses restricted volume type '
        '"hostPath"), runAsNonRoot != true (pod or container "main" must set '
        'securityContext.runAsNonRoot=true), runAsUser=0 (container "main" must not set runAsUser=0), seccompProfile '
        '(pod or containers "collect", "main" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
        '"Localhost")'), b["message"]


def test_invalid_objects_and_names(kube):
    name = new_name()
    secret, pod = objects(kube, name, "true")
    bad = json.loads(json.dumps(pod))
    bad["spec"]["containers"][0]["resources"]["limits"]["memory"] = "12Q"
    st, _, b = create(kube, "pods", bad)
    # an unparseable quantity fails decoding (400), as on a real server
    assert st == 400 and b["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"), b
    bad["spec"]["containers"][0]["resources"]["limits"]["memory"] = "-1"
    bad["spec"]["containers"][0]["resources"]["requests"]["memory"] = "-1"
    st, _, b = create(kube, "pods", bad)
    assert st == 422 and b["reason"] == "Invalid", b
    assert 'spec.containers[0].resources.limits[memory]: Invalid value: "-1": must be greater than or equal to 0' \
        in b["message"], b
    bad = json.loads(json.dumps(pod))
    bad["metadata"]["name"] = "Airlock_X"
    st, _, b = create(kube, "pods", bad)
    assert st == 422 and b["message"].startswith('Pod "Airlock_X" is invalid: metadata.name: Invalid value: '
                                                 '"Airlock_X": a lowercase RFC 1123 subdomain'), b
    bad = json.loads(json.dumps(pod))
    bad["spec"]["containers"][0]["volumeMounts"][0]["name"] = "nope"
    st, _, b = create(kube, "pods", bad)
    assert st == 422 and 'spec.containers[0].volumeMounts[0].name: Not found: "nope"' in b["message"], b
    bad = json.loads(json.dumps(pod))
    bad["spec"]["volumes"][3]["secret"]["items"][0]["path"] = "..data2"
    st, _, b = create(kube, "pods", bad)
    assert st == 422 and b["message"] == (f'Pod "{name}" is invalid: spec.volumes[3].secret.items[0].path: Invalid '
                                          """value: "..data2": must not start with '..'"""), b
    assert create(kube, "secrets", secret)[0] == 201
    st, _, b = create(kube, "secrets", secret)
    assert st == 409 and b["reason"] == "AlreadyExists" and b["message"] == f'secrets "{name}" already exists', b
    assert kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")[0] == 200
    st, _, b = kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}")
    assert st == 404 and b["message"] == f'pods "{name}" not found', b
    st, _, b = kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods", token="wrong")
    assert st == 401 and b["reason"] == "Unauthorized", b


def test_kubectl_gets_the_servers_errors_and_reads_objects(kube, tmp_path):
    name = new_name()
    _, pod = objects(kube, name, "true")
    pod["spec"]["foo"] = "bar"
    f = tmp_path / "pod.json"
    f.write_text(json.dumps(pod))
    p = kube.kubectl("create", "-f", f)
    assert p.returncode != 0
    assert (f'Error from server (BadRequest): error when creating "{f}": Pod in version "v1" cannot be handled as a '
            'Pod: strict decoding error: unknown field "spec.foo"') in p.stderr.decode(), p.stderr
    del pod["spec"]["foo"]
    pod["spec"]["containers"][0]["securityContext"]["privileged"] = True
    f.write_text(json.dumps(pod))
    p = kube.kubectl("create", "-f", f)
    assert (f'Error from server (Forbidden): error when creating "{f}": pods "{name}" is forbidden: violates '
            'PodSecurity "restricted:latest": privileged (container "main" must not set '
            'securityContext.privileged=true)') in p.stderr.decode(), p.stderr
    assert any(r["path"].endswith("/pods") and r["method"] == "POST" and r["query"].get("fieldValidation") == "Strict"
               for r in kube.requests())
    # a secret and a pod kubectl makes, read back by kubectl and by get --raw;
    # kubectl wait and delete use a streaming list (sendInitialEvents)
    sec, pod = objects(kube, name, "echo hi; sleep 1")
    for obj in (sec, pod):
        f.write_text(json.dumps(obj))
        p = kube.kubectl("create", "-f", f)
        assert p.returncode == 0, p.stderr
    p = kube.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=20s")
    assert p.returncode == 0, p.stderr
    p = kube.kubectl("logs", "-f", name, "-c", "main")
    assert p.returncode == 0 and p.stdout == b"hi\n", (p.stdout, p.stderr)
    p = kube.kubectl("delete", "pod", name, "--timeout=20s")
    assert p.returncode == 0, p.stderr
    assert kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}")[0] == 404
    p = kube.kubectl("get", "secrets", "-l", f"airlock.dev/run={name}", "-o", "json")
    assert p.returncode == 0, p.stderr
    items = json.loads(p.stdout)["items"]
    assert [i["metadata"]["name"] for i in items] == [name]
    assert base64.b64decode(items[0]["data"]["f0"]) == b"echo hi; sleep 1"
    p = kube.kubectl("get", "--raw", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")
    assert p.returncode == 0 and json.loads(p.stdout)["metadata"]["name"] == name, p.stderr
    p = kube.kubectl("delete", "secret", name)
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------ pods, for real

SCRIPT = r"""
echo "out:$(cat /work/data/in.txt)"
echo "err:line" >&2
read line; echo "stdin:$line"
echo "uid:$(id -u):$(id -g)"
grep CapEff /proc/self/status
touch /rootfile 2>/dev/null && echo "root:writable" || echo "root:readonly"
dd if=/dev/zero of=/tmp/big bs=1024 count=2048 2>/dev/null && echo "tmpfs:unbounded" || echo "tmpfs:full"
echo "in:$(ls -a /airlock/in | tr '\n' ' ')"
echo "work:$(ls -a /work | tr '\n' ' ')"
echo "data:$(readlink /airlock/in/..data) $(readlink /airlock/in/main.sh)"
echo "pids:$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max)"
echo "mem:$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max)"
echo "cpu:$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max)"
mkdir -p /out/sub && echo result > /out/sub/r.txt
exit 3
"""


def test_contract_pod_runs_end_to_end(kube):
    final, main, collect = run(kube, SCRIPT, inputs=[("data/in.txt", b"hello")], stdin=b"from-stdin\n",
                               tmpfs=1 << 20)
    st = main_state(final)["terminated"]
    assert st["exitCode"] == 3 and st["reason"] == "Error", st
    assert final["status"]["phase"] == "Failed"
    text = main.decode()
    for want in ("out:hello", "err:line", "stdin:from-stdin", "uid:65534:65534", "CapEff:\t0000000000000000",
                 "root:readonly", "tmpfs:full"):
        assert want in text, text
    # the Secret volume as the kubelet's atomic writer lays it out; STAGE copies only the items
    line = lambda p: next(x for x in text.splitlines() if x.startswith(p))
    listed = line("in:").split()
    stamp = [x for x in listed if x.startswith("..") and x not in ("..", "..data")]
    assert len(stamp) == 1 and re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+", stamp[0]), listed
    assert {"..data", "main.sh", "data"} <= set(listed), listed
    assert line("data:") == f"data:{stamp[0]} ..data/main.sh"
    assert set(line("work:")[5:].split()) == {".", "..", "main.sh", "data"}, line("work:")
    assert line("pids:") == "pids:1024"
    assert line("mem:") == f"mem:{64 << 20}" and line("cpu:") == "cpu:50000"   # 64 MiB, 500m of a 100 ms period
    files = out_tar(collect)
    assert files.get("./sub/r.txt") == b"result\n", files.keys()
    assert collect.decode().startswith("airlock-collect-ready\n")


def test_oom_killed(kube):
    # (a process the kernel kills in a container that goes on is OOMKilled too,
    # with the container's own exit code, as containerd reports it)
    final, main, _ = run(kube, "echo start; exec dd if=/dev/zero of=/dev/null bs=64M count=1", memory=16 << 20)
    st = main_state(final)["terminated"]
    assert st["reason"] == "OOMKilled" and st["exitCode"] == 137, (st, main)


def test_active_deadline(kube):
    t0 = time.monotonic()
    final, main, collect = run(kube, "echo begun; echo partial > /out/p; sleep 60", deadline=2)
    assert time.monotonic() - t0 < 20
    assert final["status"]["phase"] == "Failed" and final["status"]["reason"] == "DeadlineExceeded", final["status"]
    assert "terminated" in main_state(final)
    assert out_tar(collect).get("./p") == b"partial\n"


def test_graceful_delete_runs_collect_trap(kube):
    name = new_name()
    script = ("trap 'echo got-term; echo late > /out/late; exit 143' TERM; echo x > /out/x; "
              "echo running; while :; do sleep 1 & wait $!; done")
    secret, pod = objects(kube, name, script)
    # the kubelet's SIGTERM goes to main's PID 1: here the trapping shell
    # itself (the driver's stage shell is PID 1 and has no TERM handler,
    # so a run's script sees none: it is killed at the grace's end)
    pod["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", script]
    assert create(kube, "secrets", secret)[0] == 201
    st, _, p = create(kube, "pods", pod)
    assert st == 201
    evs = watch(kube, name, p["metadata"]["resourceVersion"],
                lambda ev: "running" in main_state(ev["object"])
                if ev["object"].get("status", {}).get("containerStatuses") else False)
    # the native sidecar ran before main started
    assert any("running" in ev["object"]["status"]["initContainerStatuses"][0]["state"] and
               main_state(ev["object"]).get("waiting", {}).get("reason") == "PodInitializing"
               for ev in evs if ev["object"].get("status", {}).get("initContainerStatuses")), evs
    rv = kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods?fieldSelector=metadata.name%3D{name}")[2]["metadata"]["resourceVersion"]
    p = kube.kubectl("get", "pods", "-o", "json")
    assert p.returncode == 0, p.stderr
    got = [i for i in json.loads(p.stdout)["items"] if i["metadata"]["name"] == name]
    assert got and got[0]["status"]["phase"] == "Running", got
    p = kube.kubectl("describe", "pod", name)
    assert p.returncode == 0 and b"SeccompProfile:   RuntimeDefault" in p.stdout, p.stderr
    # the driver's log streams, open across the deletion
    main = kube.stream(f"/api/v1/namespaces/{kube.ns}/pods/{name}/log?container=main&follow=true")
    collect = kube.stream(f"/api/v1/namespaces/{kube.ns}/pods/{name}/log?container=collect&follow=true")
    st, _, b = delete_pod(kube, name, grace=1)
    assert st == 200 and b["metadata"]["deletionGracePeriodSeconds"] == 1, b
    evs = watch(kube, name, rv, lambda ev: ev["type"] == "DELETED")
    assert evs[-1]["type"] == "DELETED"
    assert "deletionTimestamp" in evs[0]["object"]["metadata"]
    assert main_state(evs[-1]["object"])["terminated"]["exitCode"] == 143
    assert main.read() == b"running\ngot-term\n"
    # SIGTERM to the sidecar after main ended: /out as main left it
    assert set(out_tar(collect.read())) >= {"./x", "./late"}
    main.close()
    collect.close()
    # logs are gone with the pod, the containers too
    assert kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}/log?container=main")[0] == 404
    assert all(p["name"] != name for p in kube.pods())
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")


def test_logs_limit_and_waiting(kube):
    name = new_name()
    secret, pod = objects(kube, name, "yes 0123456789 | head -c 100000")
    pod["spec"]["containers"][0]["image"] = kube.ref.split("@")[0] + "@sha256:" + "0" * 64
    assert create(kube, "secrets", secret)[0] == 201
    st, _, p = create(kube, "pods", pod)
    evs = watch(kube, name, p["metadata"]["resourceVersion"],
                lambda ev: (main_state(ev["object"]).get("waiting") or {}).get("reason") == "ErrImagePull"
                if ev["object"].get("status", {}).get("containerStatuses") else False)
    assert "failed to pull" in main_state(evs[-1]["object"])["waiting"]["message"]
    st, _, b = kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}/log?container=main")
    assert st == 400 and b["message"].startswith(f'container "main" in pod "{name}" is waiting to start'), b
    delete_pod(kube, name, grace=0)
    final, main, _ = run(kube, "yes 0123456789 | head -c 100000")
    assert len(main) == 100000
    name2 = new_name()
    secret, pod = objects(kube, name2, "yes 0123456789 | head -c 100000; sleep 1")
    create(kube, "secrets", secret)
    p = create(kube, "pods", pod)[2]
    for _ in range(100):
        st, _, b = log(kube, name2, "main", limitBytes=1001)
        if st == 200:
            break
        assert b"waiting to start" in b, b
        time.sleep(0.05)
    assert st == 200 and len(b) == 1001 and b.startswith(b"0123456789\n"), b[:100]
    delete_pod(kube, name2, grace=0)
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name2}")
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")


def test_deny_all_network_policy(kube):
    """A pod the deny-all policy selects has no network; another reaches a
    listener on the double's network gateway (the host), by its own IP."""
    np_ = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "airlock-sandbox-deny-all"},
           "spec": {"podSelector": {"matchLabels": {"airlock.dev/sandbox": "true"}},
                    "policyTypes": ["Ingress", "Egress"]}}
    gw = kube.info()["gateway"]
    # the kubernetes pass's session installs the chart's policy
    # (kube_pass.cluster): away for this test, back after it
    np_path = f"/apis/networking.k8s.io/v1/namespaces/{kube.ns}/networkpolicies"
    had = kube.call("DELETE", np_path + "/airlock-sandbox-deny-all")[0] == 200
    srv = socket.socket()
    srv.bind((gw, 0))
    srv.listen(4)
    srv.settimeout(10)
    port = srv.getsockname()[1]
    script = ("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
              f"timeout 3 bash -c 'echo hello-from-pod >/dev/tcp/{gw}/{port}' 2>/dev/null && echo reached || echo unreachable")
    try:
        final, main, _ = run(kube, script, labels={"airlock.dev/sandbox": "false"})
        assert final["status"].get("podIP"), final["status"]
        assert main.decode().split() == ["lo", "eth0", "reached"] or main.decode().split() == ["eth0", "lo", "reached"], main
        conn, addr = srv.accept()
        assert conn.recv(100) == b"hello-from-pod\n" and addr[0] == final["status"]["podIP"]
        conn.close()
        st, _, b = create(kube, "networkpolicies", np_)
        assert st == 201, b
        try:
            final, main, _ = run(kube, script)
            assert "podIP" not in final["status"]
            assert main.decode().split() == ["lo", "unreachable"], main
        finally:
            kube.call("DELETE", f"/apis/networking.k8s.io/v1/namespaces/{kube.ns}/networkpolicies/airlock-sandbox-deny-all")
    finally:
        srv.close()
        if had:
            st, _, b = create(kube, "networkpolicies", np_)
            assert st == 201, b


# ------------------------------------------------------------ watches and faults

def test_watch_bookmarks_410_and_faults(kube):
    ns = kube.ns
    st, _, lst = kube.call("GET", f"/api/v1/namespaces/{ns}/pods")
    rv = lst["metadata"]["resourceVersion"]
    w = kube.stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
                    "&fieldSelector=metadata.name%3Dnone&timeoutSeconds=10")
    ev = json.loads(w.readline())
    assert ev["type"] == "BOOKMARK" and int(ev["object"]["metadata"]["resourceVersion"]) >= int(rv), ev
    # ADDED and DELETED, from a resourceVersion and from 0 (the current state first)
    name = new_name()
    sec, _ = objects(kube, name, "true")
    sw = kube.stream(f"/api/v1/namespaces/{ns}/secrets?watch=1&resourceVersion={rv}"
                     f"&fieldSelector=metadata.name%3D{name}&timeoutSeconds=5")
    assert create(kube, "secrets", sec)[0] == 201
    z = kube.stream(f"/api/v1/namespaces/{ns}/secrets?watch=1&resourceVersion=0"
                    f"&fieldSelector=metadata.name%3D{name}&timeoutSeconds=1")
    ev = json.loads(z.readline())
    assert ev["type"] == "ADDED" and ev["object"]["kind"] == "Secret" and ev["object"]["metadata"]["name"] == name
    z.close()
    assert kube.call("DELETE", f"/api/v1/namespaces/{ns}/secrets/{name}")[0] == 200
    assert [json.loads(x)["type"] for x in sw.read().splitlines()] == ["ADDED", "DELETED"]
    sw.close()
    kube.fault({"expire_watches": True})
    ev = json.loads(w.readline())
    while ev["type"] == "BOOKMARK":
        ev = json.loads(w.readline())
    assert ev["type"] == "ERROR" and ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired", ev
    assert w.readline() == b""
    w.close()
    old = kube.stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion=1&timeoutSeconds=5")
    ev = json.loads(old.readline())
    assert ev["type"] == "ERROR" and ev["object"]["message"].startswith("too old resource version: 1 ("), ev
    old.close()
    kube.fault({"watch_410": 1})
    with pytest.raises(urllib.error.HTTPError) as e:
        kube.stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}")
    assert e.value.code == 410
    # from a fresh list's resourceVersion it watches again; end_watches closes it cleanly
    rv = kube.call("GET", f"/api/v1/namespaces/{ns}/pods")[2]["metadata"]["resourceVersion"]
    w = kube.stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=30")
    kube.fault({"end_watches": True})
    assert w.read() == b""
    t0 = time.monotonic()
    w = kube.stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=1")
    assert w.read() == b"" and time.monotonic() - t0 < 3
    kube.fault({"status_500": 2})
    assert kube.call("GET", f"/api/v1/namespaces/{ns}/pods")[0] == 500
    assert kube.call("GET", f"/api/v1/namespaces/{ns}/pods")[0] == 500
    assert kube.call("GET", f"/api/v1/namespaces/{ns}/pods")[0] == 200
    old_token = kube.token()
    kube.fault({"rotate_token": True})
    assert kube.token() != old_token
    assert kube.call("GET", f"/api/v1/namespaces/{ns}/pods", token=old_token)[0] == 401
    assert kube.call("GET", f"/api/v1/namespaces/{ns}/pods")[0] == 200
    w = kube.stream(f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=30")
    kube.fault({"unreachable_s": 1})
    time.sleep(0.3)
    with pytest.raises((OSError, http.client.HTTPException)):   # an open stream breaks too
        w.read()
        raise AssertionError("the stream ended cleanly")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", kube.port), timeout=2).close()
    time.sleep(1.2)
    assert kube.call("GET", "/version")[0] == 200


def test_client_certificate_auth(kube):
    p = kube.kubectl("get", "pods", "-o", "json", kubeconfig=kube.kubeconfig_cert)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["kind"] == "List"   # kubectl's own wrapping of what it listed
    assert kube.requests()[-1]["auth"] == "cert"


def test_unschedulable_and_deleted_by_someone_else(kube):
    kube.fault({"unschedulable": True})
    name = new_name()
    secret, pod = objects(kube, name, "sleep 30")
    create(kube, "secrets", secret)
    try:
        p = create(kube, "pods", pod)[2]
        evs = watch(kube, name, p["metadata"]["resourceVersion"],
                    lambda ev: any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                                   for c in ev["object"].get("status", {}).get("conditions", [])))
        assert evs[-1]["object"]["status"]["phase"] == "Pending"
        st, _, b = kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}/log?container=main")
        assert st == 400 and b["message"] == f"pod {name} does not have a host assigned", b
    finally:
        kube.fault({"unschedulable": False})
    rv = evs[-1]["object"]["metadata"]["resourceVersion"]
    watch(kube, name, rv, lambda ev: "running" in main_state(ev["object"])
          if ev["object"].get("status", {}).get("containerStatuses") else False)
    kube.fault({"delete_pod": name})
    evs = watch(kube, name, rv, lambda ev: ev["type"] == "DELETED")
    assert "terminated" in main_state(evs[-1]["object"])
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")


def test_same_name_again_after_a_forced_delete(kube):
    name = new_name()
    secret, pod = objects(kube, name, "echo first; sleep 30")
    assert create(kube, "secrets", secret)[0] == 201
    assert create(kube, "pods", pod)[0] == 201
    st, _, b = delete_pod(kube, name, grace=0)
    assert st == 200
    assert kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}")[0] == 404
    pod["spec"]["containers"][0]["command"][-2:] = ["/bin/sh", "-c", "echo second"]
    st, _, p = create(kube, "pods", pod)
    assert st == 201, p
    final = watch(kube, name, p["metadata"]["resourceVersion"], terminal)[-1]["object"]
    assert final["status"]["phase"] == "Succeeded", final["status"]
    assert log(kube, name, "main")[2] == b"second\n"
    delete_pod(kube, name, grace=0)
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")


def test_kubelet_refusals(kube):
    """A tag (the double's rule: a real kubelet would pull it), runAsNonRoot
    without a uid on an image that runs as root, a log without its container."""
    name = new_name()
    secret, pod = objects(kube, name, "true")
    assert create(kube, "secrets", secret)[0] == 201
    pod["spec"]["containers"][0]["image"] = kube.ref.split("@")[0] + ":latest"
    p = create(kube, "pods", pod)[2]
    evs = watch(kube, name, p["metadata"]["resourceVersion"],
                lambda ev: "waiting" in main_state(ev["object"]) and
                main_state(ev["object"])["waiting"]["reason"] in ("ErrImagePull", "ImagePullBackOff")
                if ev["object"].get("status", {}).get("containerStatuses") else False)
    assert "not pinned by digest" in main_state(evs[-1]["object"])["waiting"]["message"]
    st, _, b = kube.call("GET", f"/api/v1/namespaces/{kube.ns}/pods/{name}/log")
    assert st == 400 and b["message"] == (f"a container name must be specified for pod {name}, choose one of: "
                                          "[main] or one of the init containers: [collect]"), b
    delete_pod(kube, name, grace=0)
    name2 = new_name()
    _, pod = objects(kube, name2, "true")
    pod["spec"]["securityContext"].pop("runAsUser")
    pod["spec"]["securityContext"].pop("runAsGroup")
    for c in pod["spec"]["volumes"]:
        if "secret" in c:
            c["secret"]["secretName"] = name
    p = create(kube, "pods", pod)[2]
    evs = watch(kube, name2, p["metadata"]["resourceVersion"],
                lambda ev: (ev["object"]["status"].get("initContainerStatuses") or [{}])[0].get("state", {})
                .get("waiting", {}).get("reason") == "CreateContainerConfigError")
    msg = evs[-1]["object"]["status"]["initContainerStatuses"][0]["state"]["waiting"]["message"]
    assert msg.startswith("container has runAsNonRoot and image will run as root"), msg
    delete_pod(kube, name2, grace=0)
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")


def test_start_error(kube):
    """A command the image lacks: containerd's StartError, exit code 128, the pod Failed."""
    name = new_name()
    secret, pod = objects(kube, name, "true")
    pod["spec"]["containers"][0]["command"] = ["/bin/nope"]
    assert create(kube, "secrets", secret)[0] == 201
    p = create(kube, "pods", pod)[2]
    final = watch(kube, name, p["metadata"]["resourceVersion"], terminal)[-1]["object"]
    st = main_state(final)["terminated"]
    assert final["status"]["phase"] == "Failed" and st["reason"] == "StartError" and st["exitCode"] == 128, st
    assert "/bin/nope" in st["message"]
    delete_pod(kube, name, grace=0)
    kube.call("DELETE", f"/api/v1/namespaces/{kube.ns}/secrets/{name}")
