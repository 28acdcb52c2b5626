"""The kubernetes driver attacked (docs/security.md group R, issue 37): a
hostile script in the pod, a hostile tenant, a helper that dies mid-run.
Each case is differential: the attack is shown live (a control that it
works, or that nothing else would undo it), then airlock is shown to hold.
The kubernetes pass of make check (conftest.MODULES), against the API
double (tests/kube_double) on the test dockerd."""
import os
import signal
import time

import pytest

import kube_pass
from test_kube_driver import assert_clean, held, kube_run, kube_service, wait_pod



@pytest.fixture(scope="module")
def kube():
    return kube_pass.cluster()[0]


def test_sparse_out_is_the_runs_truncation_not_airlocks_error(kube, tmp_path):
    """A sparse file in /out costs the script nothing (tmpfs holds no block
    of it) but makes the sidecar's tar as long as its apparent size: far
    past the stream's bound, and past the 2 s the kubelet gives the sidecar
    after main ends (then SIGKILL: no end line). That is the run's own
    doing: its /out is cut at the bound, said so in a skip, its files before
    the cut kept, never airlock's error (which would be refunded), and the
    driver stops reading at the bound instead of draining the stream."""
    out = tmp_path / "out"
    out.mkdir()
    # (tmpfs lists the newest first: tar reads a.txt before the sparse file)
    code = ("import os\n"
            "with open('/out/zz-sparse', 'wb') as f:\n"
            "    f.truncate(1 << 30)\n"
            "open('/out/a.txt', 'w').write('kept')\n"
            # the control: the pod's tmpfs (4 MiB) took the 1 GiB file
            "st = os.stat('/out/zz-sparse')\n"
            "print('apparent', st.st_size, 'blocks', st.st_blocks)\n")
    t0 = time.monotonic()
    st, doc, err = kube_run(code, "--tmpfs-size", "4m", "--out", out)
    took = time.monotonic() - t0
    assert f"apparent {1 << 30} blocks 0" in doc.get("stdout", ""), (doc, err)
    assert doc["reason"] == "exited" and doc["exit_code"] == 0, (doc, err)
    skips = " ".join(s.get("reason", "") + s.get("why", "") + str(s) for s in doc.get("skipped", []))
    assert "bound" in skips or "cut" in skips, doc
    assert (out / "a.txt").read_text() == "kept", doc
    assert took < 40, f"{took:.1f} s"
    assert_clean(kube)


def test_helper_killed_mid_run_leaves_no_pod_or_secret(kube, tmp_path):
    """kill -9 of the helper (an OOM kill, an operator's mistake) while its
    pod runs: nothing in the helper deletes the pod or its Secret (the
    control: both are there after the kill), and the service, which lives
    on, must (SECURITY.md P: a box's removal never depends on the life of
    the process that asked for it), not the next start's sweep."""
    svc = kube_service(tmp_path / "svc")
    svc.start()
    try:
        svc.post_run("import time; time.sleep(120)")
        name = wait_pod(kube)
        time.sleep(1)
        helpers = svc.helpers()
        assert helpers, "no helper to kill"
        # the control: the helper stopped, its pod lives on
        for pid in helpers:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(1)
        pods, _ = held(kube)
        assert name in [p.get("metadata", p).get("name") for p in pods], pods
        for pid in helpers:
            os.kill(pid, signal.SIGKILL)
        assert_clean(kube, within=20)
        # and the service goes on running pods
        ok = svc.run("print(7)")
        assert ok["state"] == "succeeded" and ok["result"]["stdout"] == "7\n", ok
    finally:
        svc.stop()


def test_unreadable_long_name_is_a_skip_not_airlocks_error(kube, tmp_path):
    """A file the script made unreadable is named by the sidecar's tar on
    its stderr, which the API server merges into the same log as the tar's
    base64 lines. Its name is the script's: deep and long, with bytes tar
    escapes as \\ooo (four for one), its message is a line far longer than
    any base64 line. That is tar speaking of the script's /out (a skip, as
    the native box names an unreadable file), not a broken stream (airlock's
    error, refunded). The control: the same /out with the file readable is
    collected whole."""
    code = ("import os\n"
            "open('/out/a.txt', 'w').write('kept')\n"
            "d = b'/out'\n"
            "for i in range(14):\n"
            "    d += b'/' + b'd' * 250\n"
            "os.makedirs(d)\n"
            "p = d + b'/' + b'\\x01' * 200\n"
            "open(p, 'w').write('x')\n"
            "os.chmod(p, 0 if MODE else 0o644)\n"
            "print('len', len(p))\n")
    for mode in (0, 1):
        out = tmp_path / f"out{mode}"
        out.mkdir()
        st, doc, err = kube_run(f"MODE = {mode}\n" + code, "--out", out)
        assert "len 3719" in doc.get("stdout", ""), (doc, err)
        assert doc["reason"] == "exited" and doc["exit_code"] == 0, (mode, doc, err)
        assert (out / "a.txt").read_text() == "kept", (mode, doc)
        skips = [str(s) for s in doc.get("skipped", [])]
        if mode:
            assert any("tar" in s or "unreadable" in s for s in skips), (skips, doc.get("stdout"))
        else:
            assert not any("tar" in s or "unreadable" in s for s in skips), doc
    assert_clean(kube)


def test_watches_that_end_at_once_are_not_hammered(kube):
    """A server (or a proxy before it) that ends every watch at once,
    empty: the driver watches again, but not in a tight loop of TLS
    handshakes against the API server for as long as the pod runs. The
    control: the fault is live (the double saw watches in its window) and
    the run still ends as it would have."""
    import threading
    from test_kube_driver import requests_now
    box = {}
    seen = len(requests_now(kube))
    # (before the pod starts, the driver watches for main's start)
    kube.fault({"watch_close_s": 4})
    t0 = time.monotonic()
    th = threading.Thread(target=lambda: box.update(zip(("st", "doc", "err"), kube_run(
        "print('done')"))))
    th.start()
    time.sleep(4)
    window = [r for r in requests_now(kube)[seen:] if (r.get("query") or {}).get("watch")]
    th.join(120)
    assert box["doc"]["reason"] == "exited" and box["doc"]["stdout"] == "done\n", box
    assert window, "no watch in the fault's window: the control did not run"
    assert len(window) <= 4 / 0.2 + 5, f"{len(window)} watches in {time.monotonic() - t0:.1f} s"
    assert_clean(kube)


def test_service_killed_mid_run_its_helper_deletes_the_pod(kube, tmp_path):
    """kill -9 of the service (not its helper) while a pod runs: the helper
    sees its job's pipe end and deletes the pod and the Secret itself, at
    once, not at the pod's deadline nor at the next start. The control: the
    pod was running when the service died."""
    svc = kube_service(tmp_path / "svc")
    svc.start()
    svc.post_run("import time; time.sleep(120)")
    name = wait_pod(kube)
    time.sleep(1)
    helpers = svc.helpers()
    assert helpers, "no helper"
    svc.kill9()
    pods, _ = held(kube)
    assert name in [p.get("metadata", p).get("name") for p in pods], pods
    try:
        assert_clean(kube, within=20)
    finally:
        for pid in helpers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
