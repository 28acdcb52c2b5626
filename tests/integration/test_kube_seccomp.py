"""Airlock's seccomp profile on Kubernetes sandbox pods, against the API
double on the test dockerd (the double reads a Localhost profile from its
seccomp root, as a kubelet reads /var/lib/kubelet/seccomp, and hands it to
dockerd as the container's seccomp):

- `airlock seccomp-profile` prints valid JSON, the same bytes each time,
  equal to what the docker driver sends dockerd for its own containers;
- a run under `--seccomp localhost:airlock/airlock.json` has ptrace, keyctl
  and io_uring_setup refused where the same run under RuntimeDefault (the
  runtime's default: Docker's here) has ptrace reach the kernel;
- a Localhost profile missing on the node is the kubelet's
  CreateContainerError, an airlock error with its message, nothing left;
- `airlock smoke --seccomp localhost:...` confirms the profile from inside
  its sandbox pod, and says NOT ENFORCED when the node's file at that path
  is not airlock's policy; the service's seccomp badge is confirmed only
  after its smoke at start passed under the profile.
The kubernetes pass of make check."""
import errno
import json
import os
import subprocess
import time

import pytest

import kube_pass
from conftest import AIRLOCK


# errnos of ptrace(PEEKDATA, no such pid), keyctl(GET_KEYRING_ID, no such
# key) and io_uring_setup(0 entries, NULL): what the kernel says (ESRCH,
# EINVAL, ...) or what a filter says (airlock's: EPERM, and ENOSYS for
# io_uring, which a program then takes for an old kernel)
PROBE = ("import ctypes, json\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "libc.syscall.restype = ctypes.c_long\n"
         "def sc(*a):\n"
         "    ctypes.set_errno(0)\n"
         "    rc = libc.syscall(*[ctypes.c_long(x) for x in a])\n"
         "    return ctypes.get_errno() if rc == -1 else 0\n"
         "print('errnos', json.dumps({'ptrace': sc(101, 2, 2147483647, 0, 0), 'keyctl': sc(250, 0, 2147483647, 0),"
         " 'io_uring_setup': sc(425, 0, 0)}))\n")


@pytest.fixture(scope="module")
def kube():
    return kube_pass.cluster()[0]


def kube_run(code, seccomp, timeout=180):
    dargs, env = kube_pass.run_args(seccomp=seccomp)
    p = subprocess.run([str(AIRLOCK), "run", "--json", *dargs, "--lang", "python", "-c", code],
                       capture_output=True, timeout=timeout, env=dict(os.environ, **env))
    try:
        return p.returncode, json.loads(p.stdout), p.stderr.decode(errors="replace")
    except ValueError:
        raise AssertionError(f"not JSON (exit {p.returncode}): {p.stdout[:2000]!r} {p.stderr[:2000]!r}") from None


def errnos(doc):
    line = [x for x in doc["stdout"].splitlines() if x.startswith("errnos ")]
    assert line, doc
    return json.loads(line[0][7:])


def no_runs_left(kube, within=15):
    deadline = time.monotonic() + within
    while True:
        doc = kube.pods()
        items = (doc.get("pods", []) + doc.get("secrets", [])) if isinstance(doc, dict) else doc
        left = [i for i in items if (i.get("metadata", i).get("name") or "").startswith("airlock-")
                and "smoke" not in json.dumps(i)]
        if not left:
            return
        assert time.monotonic() < deadline, left
        time.sleep(0.2)


def test_profile_is_what_the_docker_driver_sends(kube, tmp_path):
    import docker_util
    from image_util import CACHE
    t0 = time.monotonic()
    a = subprocess.run([str(AIRLOCK), "seccomp-profile"], capture_output=True, timeout=30)
    b = subprocess.run([str(AIRLOCK), "seccomp-profile"], capture_output=True, timeout=30)
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout.endswith(b"\n"), a.stderr
    profile = json.loads(a.stdout)
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["architectures"] == ["SCMP_ARCH_X86_64"]
    out = tmp_path / "airlock.json"
    assert subprocess.run([str(AIRLOCK), "seccomp-profile", "--out", str(out)], timeout=30).returncode == 0
    assert out.read_bytes() == a.stdout and (out.stat().st_mode & 0o777) == 0o644
    # what the pass installed in the double's seccomp root is the same file
    assert (kube.seccomp_root / kube_pass.SECCOMP_PATH).read_bytes() == a.stdout
    bad = subprocess.run([str(AIRLOCK), "seccomp-profile", "--bogus"], capture_output=True, timeout=30)
    assert bad.returncode == 125 and b"unknown option" in bad.stderr
    # the docker driver's container, on the same test dockerd, while it runs
    before = set(docker_util.airlock_containers())
    run = subprocess.Popen([str(AIRLOCK), "run", "--driver", "docker", "--runtime", "runc", "--lang", "python",
                            "-c", "import time; time.sleep(20)"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=dict(docker_util.env(), AIRLOCK_STATE=str(CACHE)))
    try:
        sent = None
        deadline = time.monotonic() + 60
        while sent is None:
            assert run.poll() is None and time.monotonic() < deadline, "no docker-driver container seen"
            for cid in set(docker_util.airlock_containers()) - before:
                p = docker_util.docker("inspect", cid, check=False)
                if p.returncode == 0:
                    opts = json.loads(p.stdout)[0]["HostConfig"]["SecurityOpt"] or []
                    sent = [o[len("seccomp="):] for o in opts if o.startswith("seccomp=")]
            time.sleep(0.2)
        assert len(sent) == 1 and json.loads(sent[0]) == profile
    finally:
        run.kill()
        run.wait(30)
    print(f"the profile, as the CLI prints it and the docker driver sends it: {time.monotonic() - t0:.1f} s")


def test_localhost_profile_refuses_what_runtime_default_lets_through(kube):
    t0 = time.monotonic()
    st, doc, err = kube_run(PROBE, kube_pass.SECCOMP)
    assert doc["reason"] == "exited" and doc["exit_code"] == 0, (doc, err)
    ours = errnos(doc)
    assert ours == {"ptrace": errno.EPERM, "keyctl": errno.EPERM, "io_uring_setup": errno.ENOSYS}, ours
    sc = doc["controls"]["seccomp"]
    assert sc["level"] == "unconfirmed" and f"Localhost {kube_pass.SECCOMP_PATH}" in sc["detail"], sc
    # the same run under the runtime's default: ptrace reaches the kernel
    # (ESRCH: no such pid), which airlock's own filter never lets happen
    st, doc, err = kube_run(PROBE, "runtime-default")
    assert doc["reason"] == "exited" and doc["exit_code"] == 0, (doc, err)
    theirs = errnos(doc)
    assert theirs["ptrace"] == errno.ESRCH, theirs
    assert "RuntimeDefault" in doc["controls"]["seccomp"]["detail"]
    no_runs_left(kube)
    print(f"under Localhost {ours}, under RuntimeDefault {theirs}: {time.monotonic() - t0:.1f} s")


def test_missing_profile_is_the_kubelets_error(kube):
    t0 = time.monotonic()
    st, doc, err = kube_run("print(1)", "localhost:airlock/missing.json", timeout=120)
    assert st != 0 and doc.get("reason") == "error", (st, doc, err)
    text = json.dumps(doc) + err
    assert "CreateContainerError" in text and "cannot load seccomp profile" in text, text
    # (the kubelet's message names the file under its seccomp root, then why;
    # the driver keeps a bounded part of it)
    assert f'{kube.seccomp_root}/airlock/missing.json"' in text, text
    assert doc["error"]["step"] == "provisioning", doc
    no_runs_left(kube)
    print(f"a missing Localhost profile: {time.monotonic() - t0:.1f} s")


def smoke(kube, registry, *extra):
    from conftest import airlock
    from image_util import CACHE
    p = airlock("smoke", "--driver", "kubernetes", "--kubeconfig", kube.kubeconfig, "--namespace", kube.namespace,
                "--registry", registry, "--timeout", "120", *extra, timeout=180,
                env=dict(os.environ, AIRLOCK_STATE=str(CACHE)))
    return p.returncode, json.loads(p.stdout), p.stderr.decode(errors="replace")


def test_smoke_confirms_the_profile(kube):
    from test_kube_smoke import set_policy
    t0 = time.monotonic()
    _, _, registry = kube_pass.cluster()
    set_policy(kube, True)
    try:
        rc, doc, err = smoke(kube, registry, "--seccomp", kube_pass.SECCOMP)
        assert rc == 0 and doc["outcome"] == "enforced", (doc, err)
        assert "refused ptrace, keyctl and io_uring_setup" in doc["reason"], doc
        assert doc["detail"]["sandbox"]["syscalls"] == {"ptrace": errno.EPERM, "keyctl": errno.EPERM,
                                                        "io_uring_setup": errno.ENOSYS}, doc
        # a file at the path that is not airlock's policy: the smoke says so
        other = kube.seccomp_root / "airlock" / "allow-all.json"
        other.write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW"}))
        rc, doc, err = smoke(kube, registry, "--seccomp", "localhost:airlock/allow-all.json")
        assert rc == 1 and doc["outcome"] == "NOT ENFORCED", (doc, err)
        assert "ptrace" in doc["reason"] and "is not airlock's profile" in doc["reason"], doc
        bad = subprocess.run([str(AIRLOCK), "smoke", "--driver", "kubernetes", "--seccomp", "localhost:/etc/x"],
                             capture_output=True, timeout=30)
        assert bad.returncode == 125 and b"relative to the kubelet's seccomp root" in bad.stderr, bad.stderr
    finally:
        set_policy(kube, False)
    print(f"the smoke under airlock's profile and under another: {time.monotonic() - t0:.1f} s")
