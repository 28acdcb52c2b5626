"""The docker driver (issue 13): `airlock run --driver docker` on a real
dockerd (docker_util.py), with runc and with gVisor (runsc). The same
script on the native box (on the same image) is the reference: a run
through a container must behave as one through the native box, except
where the driver's badge says it does not."""
import json
import os
import signal
import subprocess
import time

import pytest

import docker_util
from conftest import AIRLOCK, ROOT
from image_util import CACHE
from service_util import TERMINAL, hooks_binary, services  # noqa: F401 (a fixture)

RUNTIMES = ["runc", "runsc"]


def run(code, lang="python", *extra, driver="docker", runtime="runc", out=None, timeout=180):
    args = [str(AIRLOCK), "run", "--json", "--image", "default"]
    if driver == "docker":
        args += ["--driver", "docker", "--runtime", runtime]
    if out:
        args += ["--out", str(out)]
    p = subprocess.run([*args, *map(str, extra), "--lang", lang, "-c", code], capture_output=True, timeout=timeout,
                       env=dict(docker_util.env(), AIRLOCK_STATE=str(CACHE)))
    assert p.stdout, p.stderr.decode(errors="replace")
    return p.returncode, json.loads(p.stdout)


@pytest.fixture(autouse=True)
def no_container_left(dockerd):
    yield
    left = docker_util.airlock_containers()
    assert not left, f"containers of boxes left on the daemon: {left}"


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_run_names_its_driver_runtime_and_image(dockerd, rt):
    status, doc = run("import os; print(os.getuid(), os.getcwd())", runtime=rt)
    assert status == 0 and doc["reason"] == "exited", doc
    uid, cwd = doc["stdout"].split()
    assert cwd == "/work"
    assert int(uid) == doc["controls"]["host_uid"] and int(uid) not in (0, 65534), doc
    assert doc["controls"]["host_uid_unique"] is True
    box = doc["box"]
    assert box["driver"] == "docker" and box["engine_runtime"] == rt, box
    assert box["runtime"] == dockerd["image"]["digest"]
    assert box["engine_image"].startswith("sha256:"), box
    # the image Docker ran is airlock's, by the label the driver checks
    ins = json.loads(docker_util.docker("image", "inspect", box["engine_image"]).stdout)[0]
    assert ins["Config"]["Labels"]["dev.airlock.digest"] == dockerd["image"]["digest"].split(":")[-1]


@pytest.mark.parametrize("rt", RUNTIMES)
def test_exit_codes_signals_stdin_and_args_as_native(dockerd, rt, tmp_path):
    stdin = tmp_path / "in.txt"
    stdin.write_text("hello\n")
    cases = [
        ("import sys; print(sys.stdin.read().upper(), sys.argv[1:]); sys.exit(3)", ["--stdin", stdin]),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", []),
        ("raise ValueError('boom')", []),
    ]
    for code, extra in cases:
        _, native = run(code, "python", *extra, driver="native")
        _, dock = run(code, "python", *extra, runtime=rt)
        for k in ("exit_code", "signal", "reason", "stdout"):
            assert dock[k] == native[k], (k, code, dock, native)
        assert dock["stderr"].splitlines()[-1:] == native["stderr"].splitlines()[-1:], (dock["stderr"], native["stderr"])


def test_an_exit_code_above_128_is_not_taken_for_a_signal_under_runc(dockerd):
    # Docker reports a process killed by signal N as exit 128+N, so exit(137)
    # read as SIGKILL; under runc the kernel's record of the exec's process
    # (its pidfd) tells them apart, as the native box's wait does. The pidfd
    # is opened once the daemon names the process: one that ends before
    # (within milliseconds: the sanitizer build saw it) keeps the 128+N
    # reading, so these scripts live a moment first. (Under runsc the
    # exec's process is runsc's own, which says 128+N too: the docs list it.)
    wait = "import time; time.sleep(0.5)\n"
    for code in ("import sys; sys.exit(137)", "import sys; sys.exit(130)",
                 "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                 "import os, signal; os.kill(os.getpid(), signal.SIGINT)"):
        code = wait + code
        _, native = run(code, "python", driver="native")
        _, dock = run(code, "python", runtime="runc")
        assert (dock["exit_code"], dock["signal"], dock["reason"]) == \
            (native["exit_code"], native["signal"], native["reason"]), (code, dock, native)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_limits_end_with_the_native_reasons(dockerd, rt):
    _, doc = run("import time; time.sleep(60)", "python", "--timeout", "2", runtime=rt)
    assert doc["reason"] == "timeout" and doc["signal"] == 9, doc
    assert doc["wall_ms"] < 8000, doc
    _, doc = run("x = bytearray(512 * 1024 * 1024)", "python", "--memory", "64M", runtime=rt)
    assert doc["reason"] == "memory", doc
    _, doc = run("print('x' * 100000)", "python", "--output-limit", "4k", runtime=rt)
    assert doc["reason"] == "output_limit" and doc["stdout_truncated"] is True, doc
    assert len(doc["stdout"]) == 4096 and doc["stdout_bytes"] >= 4096, doc
    # a script that floods its output, stopped at the cap and at the wall
    # clock while its stream is still full (under gVisor a killed process is
    # reaped only once its output is read: the kill from inside must not
    # wait on it with the stream unread)
    flood = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    _, doc = run(flood, "python", runtime=rt)
    assert doc["reason"] == "output_limit" and len(doc["stdout"]) == 1 << 20, {k: doc[k] for k in ("reason", "error")
                                                                              if k in doc}
    slow = "import sys, time\nwhile True:\n    sys.stdout.write('x' * 65536); time.sleep(0.01)\n"
    _, doc = run(slow, "python", "--timeout", "2", "--output-limit", "64M", runtime=rt)
    assert doc["reason"] == "timeout" and doc["wall_ms"] < 8000, {k: doc.get(k) for k in ("reason", "error", "wall_ms")}
    spawn = ("import subprocess\nps = []\ntry:\n    for i in range(400): ps.append(subprocess.Popen(['sleep', '30']))\n"
             "except OSError:\n    pass\nprint(len(ps))")
    _, doc = run(spawn, "python", "--pids", "64", "--timeout", "30", runtime=rt)
    assert doc["reason"] == "pids", doc


@pytest.mark.parametrize("rt", RUNTIMES)
def test_what_the_script_leaves_running_dies_with_it(dockerd, rt):
    # a process that outlives the script would hold the streams open and
    # could change /out after the run: the native box kills it, so must this
    _, doc = run("(sleep 100 &); (sleep 100 > /out/late &); echo started", "bash", runtime=rt)
    assert doc["reason"] == "exited" and doc["stdout"] == "started\n", doc
    assert doc["wall_ms"] < 5000, doc


@pytest.mark.parametrize("rt", RUNTIMES)
def test_out_is_collected_under_the_native_rules(dockerd, rt, tmp_path):
    script = ("mkdir -p /out/d/e; echo a > /out/d/e/f; printf data > /out/top.bin; ln -s /etc/passwd /out/link; "
              "mkfifo /out/fifo; ln /out/top.bin /out/hard; printf x > \"/out/bad$(printf '\\001')name\"; "
              "mkdir -p /out/$(seq -s/ 1 20)")
    _, native = run(script, "bash", driver="native", out=tmp_path / "n")
    _, dock = run(script, "bash", runtime=rt, out=tmp_path / "d")
    assert dock["reason"] == "exited", dock
    key = lambda a: a["path"]
    assert sorted(dock["artifacts"], key=key) == sorted(native["artifacts"], key=key), (dock, native)
    assert sorted(dock["skipped"], key=key) == sorted(native["skipped"], key=key), (dock, native)
    for a in dock["artifacts"]:
        assert (tmp_path / "d" / a["path"]).read_bytes() == (tmp_path / "n" / a["path"]).read_bytes()
    assert not any(p.is_symlink() for p in (tmp_path / "d").rglob("*"))


@pytest.mark.parametrize("rt", RUNTIMES)
def test_inputs_are_staged_into_work(dockerd, rt, tmp_path):
    d = tmp_path / "dir"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "b.txt").write_text("bee")
    f = tmp_path / "a.csv"
    f.write_text("x,y\n1,2\n")
    _, doc = run("import os; print(sorted(os.listdir('/work')), open('/work/dir/sub/b.txt').read(), "
                 "open('/work/a.csv').read().split()[1])", "python", "--in", f, "--in", d, runtime=rt)
    assert doc["stdout"] == "['a.csv', 'dir', 'main.py'] bee 1,2\n", doc


def image_ref(dockerd):
    return "airlock-image:" + dockerd["image"]["digest"].split(":")[-1]


def status_of(dockerd, code, lang, rt=None):
    """Run CODE as the script, on the docker driver (RT) or as a plain
    `docker run` of the same image as root with Docker's defaults: the
    control, in which each escape below works."""
    if rt:
        _, doc = run(code, lang, runtime=rt)
        return doc["stdout"]
    p = docker_util.docker("run", "--rm", "--network", "none", image_ref(dockerd), "bash", "-c", code, check=False)
    return p.stdout.decode()


CONTAINMENT = [
    # (what, script, what the control prints, what a box must not print)
    ("root", "id -u", "0\n"),
    ("capabilities", "grep CapEff /proc/self/status | tr -d '\\t' | cut -d: -f2", "00000000a80425fb\n"),
    ("writable root", "touch /usr/pwned 2>/dev/null && echo wrote", "wrote\n"),
    ("privileges by exec", "grep NoNewPrivs /proc/self/status | tr -d '\\t' | cut -d: -f2", "0\n"),
]


@pytest.mark.parametrize("what,script,control", CONTAINMENT, ids=[c[0] for c in CONTAINMENT])
@pytest.mark.parametrize("rt", RUNTIMES)
def test_containment_differential(dockerd, rt, what, script, control):
    assert status_of(dockerd, script, "bash") == control, f"the control did not show {what}"
    assert status_of(dockerd, script, "bash", rt) != control, f"{what}: the box is like the control"


def test_airlocks_seccomp_policy_is_loaded_under_runc(dockerd):
    # a syscall Docker's default profile allows and airlock's refuses:
    # personality(PER_LINUX32_3GB) is not among moby's five values... both
    # refuse it; io_uring_setup is ENOSYS under airlock, allowed by neither.
    # The line that differs: Seccomp_filters counts airlock's one filter.
    _, doc = run("grep -E '^Seccomp:' /proc/self/status | tr -d '\\t'", "bash")
    assert doc["stdout"] == "Seccomp:2\n", doc
    code = ("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "r = libc.syscall(425, 1, 0)\nprint(r, errno.errorcode.get(ctypes.get_errno()))")
    _, doc = run(code)
    assert doc["stdout"] == "-1 ENOSYS\n", doc  # io_uring_setup: airlock answers ENOSYS
    assert doc["controls"]["seccomp"]["level"] == "applied", doc


def test_gvisor_is_its_own_kernel_and_says_what_it_lacks(dockerd):
    _, doc = run("import os; print(os.uname().release)", runtime="runsc")
    assert doc["stdout"] == "4.4.0\n", doc  # gVisor's Sentry, not this host's kernel
    assert doc["controls"]["seccomp"]["level"] == "not-enforced", doc
    assert "ignores the OCI seccomp profile" in doc["controls"]["seccomp"]["detail"]
    assert doc["controls"]["userns"]["level"] == "boundary", doc


def test_network_is_off_and_policies_say_so_per_runtime(dockerd):
    code = ("import socket\ns = socket.socket(); s.settimeout(2)\ntry:\n    s.connect(('1.1.1.1', 53)); print('open')\n"
            "except OSError as e:\n    print('refused')")
    for rt in RUNTIMES:
        _, doc = run(code, runtime=rt)
        assert doc["stdout"] == "refused\n", (rt, doc)
    status, doc = run("print(1)", "python", "--net", "packages", runtime="runsc")
    assert status == 125 and doc["reason"] == "error", doc
    assert "gVisor" in doc["error"]["message"], doc


def test_doctor_shows_the_drivers_controls(dockerd):
    for rt in RUNTIMES:
        p = subprocess.run([str(AIRLOCK), "doctor", "--json", "--driver", "docker", "--runtime", rt],
                           capture_output=True, env=docker_util.env(), timeout=60)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert doc["driver"] == "docker" and doc["runtime"] == rt
        assert doc["controls"]["daemon"]["level"] == "boundary", doc
        assert "API 1.41" in doc["controls"]["daemon"]["detail"], doc
        assert "root on this host" in doc["controls"]["socket"]["detail"]


def test_a_daemon_that_is_not_local_is_refused(dockerd):
    p = subprocess.run([str(AIRLOCK), "run", "--json", "--driver", "docker", "--lang", "python", "-c", "print(1)"],
                       capture_output=True, timeout=60,
                       env=dict(os.environ, DOCKER_HOST="tcp://127.0.0.1:2375", AIRLOCK_STATE=str(CACHE)))
    assert p.returncode == 125
    assert "unix://" in json.loads(p.stdout)["error"]["message"]


def test_stale_containers_are_swept_at_start(dockerd, services):
    # a container labelled as a box whose uid no live airlock holds: what a
    # killed helper leaves; the service removes it when it starts
    ref = image_ref(dockerd)
    docker_util.docker("create", "--label", "dev.airlock.box=1", "--label", "dev.airlock.uid=1900065000",
                       "--name", "airlock-box-1900065000", ref, "sleep", "1")
    assert docker_util.airlock_containers()
    svc = services.start("sweep", config={"driver": "docker", "docker_socket": str(docker_util.SOCKET)})
    assert svc.get("/healthz")[0] == 200
    assert not docker_util.airlock_containers()


# a skill's script that looks at its bundle and tries to change it; the
# control is the same change in a directory of its own (/work)
SKILL_PY = r"""import json, os, sys
a = json.load(open(sys.argv[1]))
print("hello", a["who"])
print("files", sorted(os.listdir("/skill")), sorted(os.listdir("/skill/lib")))
st = os.stat("/skill/lib/greet.py")
print("mine", st.st_uid == os.getuid(), oct(st.st_mode & 0o777), oct(os.stat("/skill").st_mode & 0o777))
# its mount's own options (gVisor's statvfs has no ST_RDONLY) and type
m = [l.split() for l in open("/proc/self/mountinfo") if l.split()[4] == "/skill"]
print("read-only mount", len(m) == 1 and "ro" in m[0][5].split(",") and m[0][m[0].index("-") + 1] != "tmpfs")
import shutil
shutil.copytree("/skill", "/work/copy")
for d in ("/work/copy", "/work/copy/lib", "/skill", "/skill/lib"):
    for what, f in (("write", lambda: open(d + "/x", "w").close()), ("chmod", lambda: os.chmod(d, 0o777)),
                    ("remove", lambda: os.unlink(d + ("/greet.py" if d.endswith("lib") else "/skill.json")))):
        try:
            f()
            print(d, what, "done")
        except OSError as e:
            print(d, what, "refused", e.errno)
print(open("/skill/lib/greet.py").read() == open(__file__).read())
"""


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_skill_runs_with_its_bundle_read_only_at_skill(dockerd, services, rt):
    # bound read-only, as the native box binds it
    from test_skills import hello_bundle, upload
    svc = services.start(f"skill_{rt}", config={"driver": "docker", "docker_socket": str(docker_util.SOCKET),
                                                 "runtime": rt})
    if not (svc.state / "images").exists():
        (svc.state / "images").symlink_to(CACHE / "images")
    name = f"dk-{rt}"
    upload(svc, hello_bundle(name=name, script=SKILL_PY, image="default"))
    status, _, run = svc.request("POST", f"/v1/skills/{name}/test",
                                 json={"entrypoint": "greet", "args": {"who": "ann"}}, timeout=180)
    assert status == 200 and run["state"] == "succeeded", run
    assert run["result"]["box"]["driver"] == "docker" and run["result"]["box"]["engine_runtime"] == rt, run["result"]
    out = run["result"]["stdout"].splitlines()
    assert out[:4] == ["hello ann", "files ['count.sh', 'lib', 'skill.json'] ['greet.py']",
                       "mine False 0o644 0o755", "read-only mount True"], out
    out = out[:3] + out[4:]
    # the control: the script changes its own copy of the bundle
    assert out[3:9] == [f"{d} {w} done" for d in ("/work/copy", "/work/copy/lib") for w in ("write", "chmod", "remove")], out
    # EROFS, as on the native box (gVisor checks the file's rights first:
    # EACCES or EPERM, the bundle being root's)
    refused = [line.rsplit(" ", 1) for line in out[9:15]]
    assert [r[0] for r in refused] == [f"{d} {w} refused" for d in ("/skill", "/skill/lib")
                                       for w in ("write", "chmod", "remove")], out
    assert all(int(r[1]) in ((30,) if rt == "runc" else (1, 13, 30)) for r in refused), out
    assert out[15] == "True", out
    # and a pooled container is never one with a /skill: a plain run after it is as ever
    plain = svc.run("import os; print(os.path.exists('/skill'))", image="default")
    assert plain["state"] == "succeeded" and plain["result"]["stdout"] == "False\n", plain


@pytest.mark.parametrize("rt", RUNTIMES)
def test_an_exec_the_daemon_starts_late_is_waited_for_not_taken_as_ended(dockerd, services, rt):
    """Docker answers an exec's start (its attached stream) before containerd
    has started the process, and runsc's exec takes hundreds of ms to, more
    on a loaded host: while the daemon says it has not started, the script
    has not ended. Taking it for ended killed the script as it began, with
    no reason of its own (reason exited, SIGKILL: "failed"), and a cancel
    that came after was lost (a rare flake of
    test_wait_with_timeout_answers_before_the_end under runsc). The test
    build makes the daemon's answers say "not started" for 1.5 s
    (AIRLOCK_TEST_EXEC_START_LATE_MS), longer than the old wait for a pid."""
    svc = services.start(f"latestart_{rt}", config={"driver": "docker", "docker_socket": str(docker_util.SOCKET),
                                                     "runtime": rt},
                         extra_env={"AIRLOCK_TEST_EXEC_START_LATE_MS": "1500"},
                         binary=hooks_binary(ROOT / "build-asan"))
    if not (svc.state / "images").exists():
        (svc.state / "images").symlink_to(CACHE / "images")
    # the script runs its course: nothing kills it as it begins
    run = svc.run("import time; time.sleep(2); print('done')", image="default")
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "done\n", run
    # and a cancel after that start is the run's end: canceled, not failed
    rid = svc.post_run("import time; time.sleep(20)", image="default")[2]["id"]
    svc.wait_state(rid, {"running"} | TERMINAL, timeout=120)
    time.sleep(3)
    svc.cancel(rid)
    assert svc.wait_state(rid, TERMINAL, timeout=60)["state"] == "canceled", svc.get_run(rid)


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_cancel_before_the_daemon_starts_the_exec_ends_the_run_at_once(dockerd, services, rt):
    """A cancel that comes while the daemon says the script's exec has not
    started yet: a kill inside then would miss a process that starts after
    it, so it waited for the process, and a daemon slow to start it (or
    never) held the cancel for up to the run's wall clock. Now the container
    goes whole at once: the run ends canceled, its /out said unread. The
    test build makes the daemon's answers say "not started" for 30 s."""
    svc = services.start(f"cancelunstarted_{rt}",
                         config={"driver": "docker", "docker_socket": str(docker_util.SOCKET), "runtime": rt},
                         extra_env={"AIRLOCK_TEST_EXEC_START_LATE_MS": "30000"},
                         binary=hooks_binary(ROOT / "build-asan"))
    if not (svc.state / "images").exists():
        (svc.state / "images").symlink_to(CACHE / "images")
    rid = svc.post_run("import time; open('/out/x', 'w').write('x'); time.sleep(100)", image="default")[2]["id"]
    svc.wait_state(rid, {"running"} | TERMINAL, timeout=120)
    time.sleep(1)
    t0 = time.monotonic()
    svc.cancel(rid)
    run = svc.wait_state(rid, TERMINAL, timeout=90)
    took = time.monotonic() - t0
    assert run["state"] == "canceled", run
    # within the kill's grace, not when the daemon's start showed (30 s)
    assert took < 15, (took, run)
    assert "/out could not be read" in json.dumps(run["skipped"]), run


@pytest.mark.parametrize("rt", RUNTIMES)
def test_a_daemon_that_hangs_does_not_hold_a_run_past_its_deadline_and_grace(dockerd, rt):
    """The daemon stops answering (SIGSTOP) while the script runs. At the
    deadline, every call the kill makes to it ends within the kill's grace:
    the run ends by its deadline plus that grace, its /out said unread (or,
    where nothing can be killed without the daemon, under gVisor, the run
    fails saying that the daemon did not answer), not after the engine's
    120 s for each of its calls. Its container's removal, asked meanwhile,
    is done once the daemon runs again."""
    args = [str(AIRLOCK), "run", "--image", "default", "--driver", "docker", "--runtime", rt, "--timeout", "5",
            "--lang", "python", "-c", "import time; print('up', flush=True); time.sleep(100)"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(docker_util.env(), AIRLOCK_STATE=str(CACHE)))
    daemon = int(docker_util.PIDFILE.read_text())
    took = None
    try:
        assert p.stdout.readline() == b"up\n", p.stderr.read().decode(errors="replace")
        os.kill(daemon, signal.SIGSTOP)
        t0 = time.monotonic()
        p.wait(timeout=90)
        took = time.monotonic() - t0
    finally:
        os.kill(daemon, signal.SIGCONT)
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read().decode(errors="replace")
    # the deadline is at most 5 s after "up"; then the grace, 5 s, and the
    # daemon's removal handed over (its own time is not waited on)
    assert took < 15, (took, err)
    if rt == "runc":
        # killed from this host: the run's own reason stands, /out unread
        assert "airlock: timeout" in err, err
        assert "skipped /out/.: the Docker daemon did not answer within the kill's grace" in err, err
    else:
        # only the daemon reaches gVisor's processes: the run fails, saying so
        assert p.returncode == 125 and 'failed at step "docker"' in err, (p.returncode, err)
        assert "the Docker daemon did not answer" in err, err
    # its removal, asked while the daemon was stopped, is done once it runs
    until = time.monotonic() + 60
    while docker_util.airlock_containers() and time.monotonic() < until:
        time.sleep(0.5)
    assert not docker_util.airlock_containers()
