"""`airlock run` and `airlock doctor` as a user drives them: the real binary, as root."""
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import AIRLOCK, MUST_WORK, airlock, need, run_code, run_json

RESULT_FIELDS = {
    "exit_code", "signal", "reason", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
    "wall_ms", "cpu_ms", "peak_memory_bytes", "artifacts", "skipped", "controls",
}


def test_python_runs_and_reports_every_field():
    doc = run_code("python", "import sys; print('hello'); print('warn', file=sys.stderr)")
    assert RESULT_FIELDS <= doc.keys()
    assert doc["reason"] == "exited" and doc["exit_code"] == 0 and doc["signal"] is None
    assert doc["stdout"] == "hello\n" and doc["stderr"] == "warn\n"
    assert doc["stdout_truncated"] is False
    assert doc["wall_ms"] > 0 and doc["peak_memory_bytes"] > 0
    c = doc["controls"]
    for k in ("seccomp", "cgroup", "userns", "host_uid", "network"):
        assert k in c
    assert c["seccomp"]["level"] == "boundary"
    assert c["cgroup"]["version"] in ("v1", "v2")
    assert c["host_uid"] not in (0, 65534)


def test_node_and_bash_run():
    assert run_code("node", "console.log(1+1)")["stdout"] == "2\n"
    assert run_code("bash", "echo $((6*7))")["stdout"] == "42\n"


def test_language_from_extension_and_arguments(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text('echo "$0|$1|$2|$PWD"; ls /work\n')
    status, doc = run_json(script, "arg one", "--not-an-option")
    assert status == 0
    first, listing = doc["stdout"].split("\n", 1)
    assert first == "job.sh|arg one|--not-an-option|/work"
    assert "job.sh" in listing.split()

    js = tmp_path / "x.mjs"
    js.write_text("console.log(process.argv.slice(2).join(','))\n")
    assert run_json(js, "a", "b")[1]["stdout"] == "a,b\n"


def test_unknown_extension_is_a_clear_error(tmp_path):
    f = tmp_path / "prog.rb"
    f.write_text("puts 1\n")
    p = airlock("run", f)
    assert p.returncode == 125
    assert b"--lang" in p.stderr


def test_exit_status_and_signals():
    p = airlock("run", "--lang", "bash", "-c", "exit 3")
    assert p.returncode == 3
    p = airlock("run", "--lang", "bash", "-c", "kill -TERM $$")
    assert p.returncode == 128 + signal.SIGTERM
    doc = run_code("bash", "kill -TERM $$")
    assert doc["signal"] == signal.SIGTERM and doc["exit_code"] is None and doc["reason"] == "exited"


def test_streams_live_and_prints_a_summary():
    # The first line must reach us while the script is still running.
    proc = subprocess.Popen([str(AIRLOCK), "run", "--timeout", "20", "--lang", "python", "-c",
                             "import time; print('ready', flush=True); time.sleep(15)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        assert line == b"ready\n"
        assert proc.poll() is None, "output arrived only after the script ended"
    finally:
        proc.kill()
        proc.wait()
    p = airlock("run", "--lang", "bash", "-c", "echo out; echo err >&2")
    assert p.stdout == b"out\n"
    assert p.stderr.startswith(b"err\n")
    assert b"airlock: exited 0" in p.stderr


def test_terminal_escapes_are_not_passed_raw_to_a_tty():
    # Through a pty, the CLI shows ESC as ^[ so a script cannot drive the terminal.
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(AIRLOCK), [str(AIRLOCK), "run", "--lang", "bash", "-c", r"printf '\033]52;c;aGk=\007x\n'"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    assert b"\x1b]52" not in out
    assert b"^[]52" in out


def test_inputs_staged_and_outputs_collected(tmp_path):
    (tmp_path / "sales.csv").write_text("region,amount\nnorth,3\nsouth,4\n")
    d = tmp_path / "data" / "nested"
    d.mkdir(parents=True)
    (d / "x.txt").write_text("deep")
    script = tmp_path / "analysis.py"
    script.write_text(
        "import csv, os\n"
        "rows = list(csv.DictReader(open('sales.csv')))\n"
        "total = sum(int(r['amount']) for r in rows)\n"
        "os.makedirs('/out/report', exist_ok=True)\n"
        "open('/out/report/total.txt', 'w').write(str(total))\n"
        "open('/out/copy.txt', 'w').write(open('data/nested/x.txt').read())\n"
        "print(total)\n")
    results = tmp_path / "results"
    status, doc = run_json("--in", tmp_path / "sales.csv", "--in", tmp_path / "data", "--out", results, script)
    assert status == 0, doc
    assert doc["stdout"] == "7\n"
    assert (results / "report" / "total.txt").read_text() == "7"
    assert (results / "copy.txt").read_text() == "deep"
    arts = {a["path"]: a for a in doc["artifacts"]}
    assert set(arts) == {"report/total.txt", "copy.txt"}
    assert arts["report/total.txt"]["sha256"] == hashlib.sha256(b"7").hexdigest()
    assert arts["report/total.txt"]["size"] == 1


def test_skipped_entries_are_listed_with_reasons(tmp_path):
    results = tmp_path / "r"
    status, doc = run_json("--out", results, "--max-artifact-size", "1K", "--lang", "bash", "-c",
                           "ln -s /etc/passwd /out/link; mkfifo /out/fifo; head -c 4096 /dev/zero > /out/big;"
                           "echo ok > /out/fine; echo s > /out/suid; chmod 4755 /out/suid")
    assert status == 0
    why = {s["path"]: s["why"] for s in doc["skipped"]}
    assert "symbolic link" in why["link"]
    assert "fifo" in why["fifo"]
    assert "per-file cap" in why["big"]
    assert {a["path"] for a in doc["artifacts"]} == {"fine", "suid"}
    # normalised modes on the host: no setuid, no exec
    assert (results / "suid").stat().st_mode & 0o7777 == 0o644
    assert not (results / "link").exists() and not (results / "fifo").exists()


def test_artifact_caps_count_and_total(tmp_path):
    status, doc = run_json("--max-artifacts", "3", "--lang", "bash", "-c",
                           "for i in $(seq 1 10); do echo $i > /out/f$i; done")
    assert len(doc["artifacts"]) == 3
    assert sum(1 for s in doc["skipped"] if "count cap" in s["why"]) == 7
    status, doc = run_json("--max-artifacts-total", "10K", "--lang", "bash", "-c",
                           "for i in 1 2 3 4; do head -c 4096 /dev/urandom > /out/f$i; done")
    assert len(doc["artifacts"]) == 2
    assert sum(a["size"] for a in doc["artifacts"]) <= 10 * 1024


def test_timeout_kills_within_deadline_plus_grace():
    status, doc = run_json("--timeout", "2", "--lang", "bash", "-c", "trap '' TERM; sleep 100")
    assert doc["reason"] == "timeout"
    assert status == 128 + signal.SIGKILL
    assert 2000 <= doc["wall_ms"] < 2000 + 1500
    assert not Path(doc["box"]["cgroup"]).exists(), "cgroup left behind"


def test_memory_limit_is_reported():
    doc = run_code("python", "x = bytearray(300 * 1024 * 1024); print(len(x))", "--memory", "64M")
    assert doc["reason"] == "memory"
    assert doc["signal"] == signal.SIGKILL
    assert doc["peak_memory_bytes"] <= 64 * 1024 * 1024


def test_fork_bomb_is_reported_as_pids():
    doc = run_code("bash", ":(){ :|:& };:; sleep 2", "--pids", "64", "--timeout", "20")
    assert doc["reason"] == "pids"


def test_output_flood_is_capped_with_bounded_memory():
    proc = subprocess.Popen([str(AIRLOCK), "run", "--json", "--lang", "python", "-c",
                             "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    doc = json.loads(out)
    assert doc["reason"] == "output_limit"
    assert doc["stdout_truncated"] is True
    assert len(doc["stdout"]) == 1024 * 1024
    assert doc["stdout_bytes"] > 1024 * 1024


def test_output_flood_airlock_rss_stays_bounded():
    # airlock's own peak RSS (VmHWM, read until it exits: wait4's maxrss
    # would also count the box's processes it reaps): 10x the cap flooded at
    # it must not be buffered.
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(str(AIRLOCK), [str(AIRLOCK), "run", "--json", "--output-limit", "1M", "--lang", "python", "-c",
                                "import sys\nwhile True: sys.stdout.write('y' * 1048576)"])
    hwm = 0
    while True:
        try:
            # until the exec, the child is a copy of this (large) pytest process
            status_text = open(f"/proc/{pid}/status").read()
            fields = dict(l.split(":", 1) for l in status_text.splitlines() if ":" in l)
            if fields["Name"].strip() == "airlock" and "VmHWM" in fields:
                hwm = max(hwm, int(fields["VmHWM"].split()[0]))
        except (OSError, KeyError):
            pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGKILL
    assert 0 < hwm < 48 * 1024, f"airlock peaked at {hwm} KiB"


def test_invalid_utf8_and_nul_survive_as_json():
    doc = run_code("bash", r"printf 'a\x00b\xff\xfec\n'")
    assert doc["stdout"] == "a\x00b\ufffd\ufffdc\n"


def test_airlock_failure_exits_125_and_names_the_step(tmp_path):
    p = airlock("run", "--in", tmp_path / "missing.csv", "--lang", "bash", "-c", "true")
    assert p.returncode == 125
    assert b'step "stage"' in p.stderr and b"missing.csv" in p.stderr
    p = airlock("run", "--memory", "1T", "--lang", "bash", "-c", "true")
    assert p.returncode == 125 and b"outside the allowed range" in p.stderr
    p = airlock("run", "--timeout", "abc", "--lang", "bash", "-c", "true")
    assert p.returncode == 125 and b"bad value" in p.stderr
    p = airlock("run", "--lang", "cobol", "-c", "x")
    assert p.returncode == 125 and b"unknown language" in p.stderr
    p = airlock("run", "--net", "everywhere", "--lang", "bash", "-c", "true")
    assert p.returncode == 125 and b"unknown network policy" in p.stderr
    p = airlock("bogus")
    assert p.returncode == 125


def test_exec_failure_is_an_error_not_a_script_exit(tmp_path):
    # An input named like the script collides: a clear staging error.
    (tmp_path / "main.py").write_text("x")
    p = airlock("run", "--in", tmp_path / "main.py", "--lang", "python", "-c", "print(1)")
    assert p.returncode == 125 and b"two inputs" in p.stderr


def test_input_larger_than_work_is_refused(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(8 * 1024 * 1024)
    p = airlock("run", "--tmpfs-size", "4M", "--in", big, "--lang", "bash", "-c", "true")
    assert p.returncode == 125
    assert b"does not fit" in p.stderr or b"exceed" in p.stderr


def test_stdin_file(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("from stdin\n")
    assert run_code("bash", "cat", "--stdin", f)["stdout"] == "from stdin\n"
    assert run_code("bash", "cat; echo done")["stdout"] == "done\n"  # /dev/null by default


def test_each_concurrent_box_has_its_own_host_uid():
    procs = [subprocess.Popen([str(AIRLOCK), "run", "--json", "--lang", "bash", "-c", "sleep 1"],
                              stdout=subprocess.PIPE) for _ in range(3)]
    uids = [json.loads(p.communicate(timeout=60)[0])["box"]["host_uid"] for p in procs]
    assert len(set(uids)) == 3, uids
    assert all(u >= 1_000_000 for u in uids)


def test_nothing_of_the_box_survives_the_run():
    status, doc = run_json("--lang", "bash", "-c",
                           "(setsid sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & disown; echo $! > /out/pid")
    assert status == 0
    uid = doc["box"]["host_uid"]
    time.sleep(0.2)
    left = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid == uid:
                    left.append(p.name)
            except FileNotFoundError:
                pass
    assert left == []
    assert not Path(doc["box"]["cgroup"]).exists()


def test_cgroup_v2_backend_on_the_unified_hierarchy():
    """This host's controllers live in v1; its empty v2 hierarchy still has
    cgroup.kill and cgroup.procs, so the v2 backend's kill path runs for real."""
    root = Path("/sys/fs/cgroup/unified")
    need(root.joinpath("cgroup.procs").exists(), "no cgroup2 hierarchy at /sys/fs/cgroup/unified")
    env = dict(os.environ, AIRLOCK_CGROUP="v2", AIRLOCK_CGROUP_ROOT=str(root))
    status, doc = run_json("--timeout", "2", "--lang", "bash", "-c",
                           "(setsid sleep 300 &); sleep 300", env=env)
    assert doc["controls"]["cgroup"]["version"] == "v2"
    assert doc["reason"] == "timeout"
    assert doc["box"]["cgroup"].startswith(str(root))
    assert not Path(doc["box"]["cgroup"]).exists()
    # what it cannot enforce here it says so
    mem = doc["controls"]["cgroup"]["memory"]["level"]
    ctl = (root / "cgroup.controllers").read_text().split()
    assert (mem == "not-enforced") == ("memory" not in ctl)


def test_rootless_runs_and_reports_what_it_cannot_enforce(tmp_path):
    need(os.geteuid() == 0, "needs root to switch to an unprivileged user")
    need(Path("/usr/bin/setpriv").exists(), "setpriv (util-linux) missing")
    os.chmod(tmp_path, 0o755)
    p = subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", str(AIRLOCK), "run", "--json",
                        "--lang", "python", "-c", "import os; print(os.getuid())"],
                       capture_output=True, timeout=60, cwd=tmp_path)
    if p.returncode == 125:
        # refusing is allowed, but only with a reason
        assert b"failed at step" in p.stderr
        return
    doc = json.loads(p.stdout)
    assert doc["stdout"] == "65534\n"
    assert doc["controls"]["host_uid"] == 1000
    assert doc["controls"]["userns"]["level"] == "applied"
    assert doc["controls"]["cgroup"]["memory"]["level"] == "not-enforced"


def test_doctor_lists_every_control():
    p = airlock("doctor", "--json", check=True)
    doc = json.loads(p.stdout)
    names = {c["control"]: c for c in doc["controls"]}
    for want in ("user namespace", "cgroup memory", "cgroup pids", "cgroup cpu", "seccomp", "no_new_privs",
                 "network namespace", "tmpfs caps", "openat2", "own inodes"):
        assert want in names, want
        assert names[want]["level"] in ("boundary", "applied", "not-enforced")
        assert names[want]["detail"]
    assert names["seccomp"]["level"] == "boundary"
    assert names["user namespace"]["level"] == "boundary"
    # (root: the runtime's overlays and /dev's nodes both the box's own)
    assert names["own inodes"]["level"] == ("boundary" if os.geteuid() == 0 else "applied"), names["own inodes"]
    text = airlock("doctor", check=True).stdout.decode()
    assert "seccomp" in text and "boundary" in text


def test_sigterm_cancels_the_box_cleanly():
    proc = subprocess.Popen([str(AIRLOCK), "run", "--json", "--lang", "python", "-c",
                             "import time; print('up', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    doc = json.loads(out)
    assert doc["reason"] == "canceled"
    assert doc["wall_ms"] < 10_000
    assert not Path(doc["box"]["cgroup"]).exists()
    assert not Path(f"/proc/{doc['box']['init_pid']}").exists() or \
        Path(f"/proc/{doc['box']['init_pid']}/status").read_text().find("airlock") < 0


@pytest.mark.parametrize("words", [["run"], ["run", "--json"], ["doctor"], ["image"], ["image", "build"],
                                   ["image", "import"], ["image", "export"], ["serve"], ["admin"], ["admin", "key", "create"],
                                   ["mcp"], ["helper"]])
def test_every_subcommand_answers_help_with_its_usage(words):
    """`--help` (and `-h`) print the subcommand's usage on stdout and exit 0,
    doing nothing else: `airlock run --help` once answered "--help needs a
    value", and `airlock doctor --help` ran the doctor."""
    for flag in ("--help", "-h"):
        p = airlock(*words, flag, input=b"", timeout=20)
        out = p.stdout.decode()
        assert p.returncode == 0, (words, flag, p.returncode, p.stderr[:300])
        assert out.startswith("usage: airlock "), (words, flag, out[:300])
        assert words[0] in out.splitlines()[0], out[:200]
        assert b"CONTROL" not in p.stdout and b'"type"' not in p.stdout


def test_help_after_the_script_is_the_scripts():
    """After the script, --help is an argument of the script's own."""
    _, doc = run_json("--lang", "python", "-c", "import sys; print(sys.argv[1:])", "--help")
    assert doc["exit_code"] == 0 and doc["stdout"] == "['--help']\n", doc["stdout"]


def test_an_unknown_doctor_option_is_refused():
    p = airlock("doctor", "--jsn")
    assert p.returncode == 125 and b"unknown option --jsn" in p.stderr and not p.stdout
