"""Hostile battery, O5: no box watches another (docs/security.md, SECURITY.md
Q). inotify needs only read access, and the kernel reports an access
through every mount of an inode: a tree bound from the host into every box
(its /usr, the /dev nodes) let one box watch, live and by name, what every
other box and the host read and wrote. Each box now has inodes of its own
(an overlay of each read-only tree, /dev nodes made for it alone).

Differential: the same watcher run unconfined on the host sees the actors'
reads and writes (the control); run in a box it sees none of them."""
import json
import os
import threading
import time

from battery_util import DRIVER, ON_DOCKER, box_py, harness, host_py  # noqa: F401

# a module no box and no host process of the test's imports by itself,
# found by each side where its runtime has it (a spec opens no file)
TARGET = "smtplib"
SECONDS = 4

WATCH = r'''
import ctypes, importlib.util, json, os, struct, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
if fd < 0:
    # EMFILE: the user's inotify instances (128 by default, for all of
    # root's processes on a busy host) are all taken
    print(json.dumps({"init_errno": ctypes.get_errno()}))
    raise SystemExit(3)
paths = @PATHS@
where = lambda p: p if p.startswith("/") else importlib.util.find_spec(p).origin
wds = {libc.inotify_add_watch(fd, where(p).encode(), 0xfff): p for p in paths}
assert all(w > 0 for w in wds), (wds, ctypes.get_errno())
seen = {p: 0 for p in paths}
end = time.monotonic() + @SECONDS@
while time.monotonic() < end:
    time.sleep(0.05)
    try:
        b = os.read(fd, 65536)
    except BlockingIOError:
        continue
    i = 0
    while i < len(b):
        wd, mask, cookie, n = struct.unpack_from("iIII", b, i)
        i += 16 + n
        seen[wds[wd]] += 1
print(json.dumps(seen))
'''

# what the other party does the whole while: read the module, write /dev/null
ACT = r'''
import importlib.util, time
target = importlib.util.find_spec("@TARGET@").origin
end = time.monotonic() + @SECONDS@
while time.monotonic() < end:
    open(target, "rb").read(64)
    open("/etc/passwd", "rb").read(1)
    with open("/dev/null", "w") as f:
        f.write("x")
    time.sleep(0.02)
'''


def watcher(paths, seconds=SECONDS):
    return WATCH.replace("@PATHS@", json.dumps(paths)).replace("@SECONDS@", str(seconds))


def actor(seconds):
    return ACT.replace("@TARGET@", TARGET).replace("@SECONDS@", str(seconds))


def last(text):
    return json.loads(text.strip().splitlines()[-1])


def host_watch(paths, seconds):
    """The control: a watcher on the host while a host actor acts, tried
    again while root's inotify instances are all taken by the host's other
    processes (a CI machine running browsers and daemons beside the suite
    saw it print nothing)."""
    deadline = time.monotonic() + 30
    while True:
        acting = threading.Thread(target=host_py, args=(actor(seconds + 1),), daemon=True)
        acting.start()
        p = host_py(watcher(paths, seconds))
        acting.join()
        out = p.stdout.decode()
        got = last(out) if out.strip() else None
        if got is not None and "init_errno" not in got:
            return got
        harness(time.monotonic() < deadline and got is not None,
                f"the control's watcher failed: {p.returncode} {out!r} {p.stderr.decode(errors='replace')[-2000:]}")
        time.sleep(1)


def test_o5_no_box_watches_another_boxs_or_the_hosts_reads_and_writes():
    paths = [TARGET, "/dev/null"]
    # control: a watcher on the host sees a host actor's reads and writes
    seen = host_watch(paths, SECONDS - 1)
    harness(seen[TARGET] > 0 and seen["/dev/null"] > 0, f"the control saw nothing: {seen}")

    # the box: the host and another box act for the whole time it watches
    # (each longer than a box's start on a loaded host)
    span = SECONDS + 8
    other = {}
    threads = [threading.Thread(target=host_py, args=(actor(span),), daemon=True),
               threading.Thread(target=lambda: other.update(box_py(actor(span))), daemon=True)]
    for t in threads:
        t.start()
    doc = box_py(watcher(paths))
    for t in threads:
        t.join()
    assert doc["exit_code"] == 0, doc
    assert other.get("exit_code") == 0, other
    seen = last(doc["stdout"])
    if ON_DOCKER:
        # a container's rootfs is an overlay of its own; only what the
        # driver binds is shared (docs/security.md, O5)
        assert seen[TARGET] == 0, seen
        return
    assert seen == {TARGET: 0, "/dev/null": 0}, seen


def test_o5_a_box_still_reads_and_writes_its_own_devices_and_runtime():
    # what the box's own inodes must still do: the nodes open and work, the
    # box sees its own accesses, and it can write none of the host's files
    code = r'''
import ctypes, errno, importlib.util, json, os, struct
TARGET = importlib.util.find_spec("@TARGET@").origin
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
libc.inotify_add_watch(fd, b"/dev/null", 0xfff)
libc.inotify_add_watch(fd, TARGET.encode(), 0xfff)
out = {}
with open("/dev/null", "w") as f:
    f.write("x")
out["urandom"] = len(open("/dev/urandom", "rb").read(16))
out["zero"] = open("/dev/zero", "rb").read(4) == b"\0" * 4
try:
    os.write(os.open("/dev/full", os.O_WRONLY), b"x")
except OSError as e:
    out["full"] = errno.errorcode[e.errno]
open(TARGET, "rb").read(1)
out["own_events"] = len(os.read(fd, 65536)) > 0
for name, p in (("dev", "/dev/newfile"), ("usr", "/usr/airlock-x"), ("module", TARGET)):
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
        out[name] = "written"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
try:
    os.mknod("/tmp/null", 0o666 | 0o020000, os.makedev(1, 3))
    out["mknod"] = "made"
except OSError as e:
    out["mknod"] = errno.errorcode[e.errno]
opts = {l.split()[4]: l.split()[5] for l in open("/proc/self/mountinfo")}
out["devopts"] = opts.get("/dev/null")
print(json.dumps(out))
'''.replace("@TARGET@", TARGET)
    doc = box_py(code)
    assert doc["exit_code"] == 0, doc
    out = last(doc["stdout"])
    assert out["urandom"] == 16 and out["zero"] and out["full"] == "ENOSPC", out
    assert out["own_events"], out
    assert out["mknod"] == "EPERM", out
    for p in ("dev", "usr", "module"):
        assert out[p] in ("EROFS", "EACCES", "EPERM"), out
    if not ON_DOCKER:
        # each node a read-only, nosuid, noexec bind of its own (/dev
        # itself is on the nodev root: test_battery_d.py's D5)
        assert set(out["devopts"].split(",")) >= {"ro", "nosuid", "noexec"}, out


def test_o5_no_box_watches_another_on_an_image():
    # the same on an image's tree (src/image/runtime_image.c): every box of
    # the image read one /usr and /etc; now each has its overlays. The
    # actor is another box of the image (the host reads not the image's)
    from image_util import box, ensure_default_image
    if ON_DOCKER or DRIVER == "forked":
        return  # (the driver's own: the case above and test_warm_fork.py)
    ensure_default_image()
    other = {}
    t = threading.Thread(target=lambda: other.update(doc=box(actor(SECONDS + 8))), daemon=True)
    t.start()
    status, doc = box(watcher([TARGET, "/dev/null", "/etc/passwd"]))
    t.join()
    assert status == 0 and other["doc"][0] == 0, (doc, other)
    seen = last(doc["stdout"])
    assert seen == {TARGET: 0, "/dev/null": 0, "/etc/passwd": 0}, seen
