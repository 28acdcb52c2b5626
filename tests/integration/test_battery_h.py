"""Hostile battery, group H: artifact collection from /out (SECURITY.md 5.H)."""
import gzip
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import uuid
import zipfile
import zlib
from pathlib import Path

import pytest

from battery_util import (ON_GVISOR, badge, AIRLOCK, NOBODY, LiveRun, assert_box_gone, assert_exited, box_bash, describe,
                          harness, host_bash, host_py, sha256_file, uniq, plain_workdir, outdir)  # noqa: F401


def _py(code):
    return "exec python3 - <<'EOF'\n" + code + "\nEOF\n"


def _host_tree(d):
    """Every entry under d (lstat, never following)."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            out[str(p.relative_to(d))] = p.lstat()
    return out


def _assert_regular_only(d):
    bad = {p: stat.filemode(st.st_mode) for p, st in _host_tree(d).items()
           if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode))}
    assert not bad, f"non-regular entries written on the host: {bad}"


def _host_contents():
    res = {}
    for p in ("/etc/shadow", "/etc/passwd", "/etc/hostname", "/etc/hosts"):
        try:
            res[p] = Path(p).read_bytes()
        except OSError:
            pass
    return res


def _assert_no_host_content(d, extra=()):
    host = _host_contents()
    needles = [v for v in host.values() if len(v) > 8] + list(extra)
    for p, st in _host_tree(d).items():
        if stat.S_ISREG(st.st_mode):
            data = (Path(d) / p).read_bytes()
            for n in needles:
                assert n not in data, f"host content in artifact {p}"


H1_SH = r'''
cd /out
ln -s /etc/shadow a; ln -s /proc/self/root/etc/hostname b; ln -s ../../../../ c; ln -s / d
for i in $(seq 0 39); do ln -s l$((i+1)) l$i; done; ln -s /etc/passwd l40
mkdir -p lib/x86_64-linux-gnu etc && cp /work/libnss_files.so.2 lib/x86_64-linux-gnu/ && \
  printf 'passwd: files\ngroup: files\nhosts: files\n' > etc/nsswitch.conf
echo plain > plain.txt
echo ok
'''


def test_h1_symlinks_never_followed(outdir, plain_workdir):
    tag = uuid.uuid4().hex[:10]
    marker = Path(f"/tmp/airlock-battery-nss-{tag}")
    src = plain_workdir / "nss.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void pwn(void) {\n'
                   f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("loaded", f); fclose(f); }}\n}}\n')
    lib = plain_workdir / "libnss_files.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    # control: a naive collector (cp -rL) copies host content through the links
    naive_src = plain_workdir / "naive-out"
    naive_src.mkdir()
    host_bash(H1_SH.replace("cd /out", f"cd {naive_src}").replace("/work/", f"{plain_workdir}/"))
    naive_dst = plain_workdir / "naive-dst"
    naive_dst.mkdir()
    for n in ("a", "b", "l0", "plain.txt"):   # a following copy (never of c or d: that is the host root)
        subprocess.run(["cp", "-L", str(naive_src / n), str(naive_dst / n)], capture_output=True)
    harness((naive_dst / "a").exists() and (naive_dst / "a").read_bytes() == Path("/etc/shadow").read_bytes(),
            "control: a following collector did not copy /etc/shadow")

    doc = box_bash(H1_SH, "--in", str(lib), "--out", str(outdir))
    assert_exited(doc)
    assert "ok" in doc["stdout"], describe(doc)
    _assert_regular_only(outdir)
    _assert_no_host_content(outdir)
    collected = {a["path"] for a in doc["artifacts"]}
    skipped = {s["path"] for s in doc["skipped"]}
    links = {"a", "b", "c", "d"} | {f"l{i}" for i in range(41)}
    assert not (links & collected), f"symlinks collected as files: {links & collected}"
    assert links <= skipped, f"symlinks neither recorded nor reported: {links - skipped - collected}"
    assert "plain.txt" in collected
    assert not marker.exists(), "the daemon loaded the library planted in /out (NSS/dlopen)"


H2_PY = r'''
import ctypes, os, sys, time
TAG = "@TAG@"
os.makedirs("/out/dir", exist_ok=True)
open(f"/out/dir/airlock-battery-{TAG}", "w").write("box content\n")
os.symlink("/etc", "/out/link")
os.symlink("/", "/out/rootlink")
libc = ctypes.CDLL(None, use_errno=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        end = time.time() + @SECS@
        while time.time() < end:
            libc.renameat2(-100, b"/out/dir", -100, b"/out/link", 2)      # RENAME_EXCHANGE
            libc.renameat2(-100, b"/out/dir", -100, b"/out/rootlink", 2)
        os._exit(0)
    os._exit(0)
time.sleep(0.3)
print("main exits")
'''


def test_h2_toctou_rename_race(outdir, plain_workdir):
    tag = uuid.uuid4().hex[:10]
    secret_file = Path(f"/etc/airlock-battery-{tag}")
    secret = b"HOST-SECRET-" + tag.encode() + b"\n"
    secret_file.write_bytes(secret)
    os.chmod(secret_file, 0o644)
    try:
        # control: unconfined, a reader racing the swap does read the host file
        d = plain_workdir / "race"
        d.mkdir()
        os.chmod(d, 0o777)
        code = H2_PY.replace("@TAG@", tag).replace("@SECS@", "1.5").replace("/out/", f"{d}/")
        subprocess.Popen(as_nobody_py(code, plain_workdir.path))
        hits = 0
        end = time.time() + 1.2
        while time.time() < end:
            try:
                if (d / "dir" / f"airlock-battery-{tag}").read_bytes() == secret:
                    hits += 1
            except OSError:
                pass
        harness(hits > 0, "control: the rename race never exposed the host file to a following reader")
        time.sleep(0.5)

        t0 = time.monotonic()
        doc = box_bash(_py(H2_PY.replace("@TAG@", tag).replace("@SECS@", "30")), "--out", str(outdir),
                       "--timeout", "20")
        assert_exited(doc)
        assert time.monotonic() - t0 < 10, "the run waited for the racer instead of killing it"
        assert_box_gone(doc)
        _assert_regular_only(outdir)
        _assert_no_host_content(outdir, extra=[secret])
        assert secret_file.read_bytes() == secret
    finally:
        secret_file.unlink(missing_ok=True)


def as_nobody_py(code, wd):
    f = Path(wd) / f"race-{uuid.uuid4().hex[:6]}.py"
    f.write_text(code)
    os.chmod(f, 0o644)
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3", str(f)]


H3_PY = r'''
import errno, json, os
def e(f):
    try:
        f(); return "ok"
    except OSError as x:
        return errno.errorcode[x.errno]
out = {}
out["ln_etc_out"] = e(lambda: os.link("/etc/passwd", "/out/h"))
out["ln_etc_tmp"] = e(lambda: os.link("/etc/passwd", "/tmp/h"))
out["ln_usr_out"] = e(lambda: os.link("/usr/bin/python3", "/out/p"))
open("/out/x", "w").write("x" * 1000)
out["ln_out_out"] = e(lambda: os.link("/out/x", "/out/y"))
open("/tmp/t", "w").write("t")
out["rename_tmp_out"] = e(lambda: os.rename("/tmp/t", "/out/t"))
print(json.dumps(out))
'''


def test_h3_hardlinks(outdir, plain_workdir):
    c = host_py(H3_PY.replace("/tmp/", str(plain_workdir) + "/t-").replace("/out/", str(plain_workdir) + "/"),
                cwd=str(plain_workdir.path))
    cr = json.loads(c.stdout.decode().splitlines()[-1])
    harness(cr["ln_etc_out"] == "ok", f"control (root, same fs): hardlink to /etc/passwd: {cr}")
    doc = box_bash(_py(H3_PY), "--out", str(outdir))
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    for k in ("ln_etc_out", "ln_etc_tmp", "ln_usr_out", "rename_tmp_out"):
        assert r[k] in ("EXDEV", "EPERM"), f"{k} in the box: {r[k]} (want EXDEV/EPERM)"
    assert r["ln_out_out"] == "ok"
    _assert_regular_only(outdir)
    _assert_no_host_content(outdir)
    passwd = os.stat("/etc/passwd")
    for p, st in _host_tree(outdir).items():
        assert (st.st_dev, st.st_ino) != (passwd.st_dev, passwd.st_ino), f"{p} is a link to /etc/passwd"
        if stat.S_ISREG(st.st_mode):
            assert st.st_nlink == 1 or p in ("x", "y"), f"{p} has {st.st_nlink} links on the host"
    arts = {a["path"]: a for a in doc["artifacts"]}
    assert "x" in arts or "y" in arts


H4_PY = r'''
import os, socket
os.mkfifo("/out/pipe")
os.mkfifo("/out/fifo-named-like.txt")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("/out/sock")
os.mkdir("/out/sub")
os.mkfifo("/out/sub/deep.fifo")
open("/out/real.txt", "w").write("real\n")
print("ok")
'''


def test_h4_fifos_and_sockets_skipped_unopened(outdir, plain_workdir):
    f = plain_workdir / "fifo"
    os.mkfifo(f)
    c = subprocess.run(["timeout", "1", "cat", str(f)], capture_output=True)
    harness(c.returncode == 124, "control: opening a FIFO for read did not block")
    run = LiveRun("--out", str(outdir), "--lang", "python", "-c", H4_PY)
    doc = run.wait(timeout=30)
    assert_exited(doc)
    assert run.wall < 10, f"collection took {run.wall:.1f}s (opened a FIFO?)"
    skipped = {s["path"] for s in doc["skipped"]}
    for p in ("pipe", "fifo-named-like.txt", "sock", "sub/deep.fifo"):
        assert p in skipped, f"{p} not reported as skipped: {doc['skipped']}"
    assert {a["path"] for a in doc["artifacts"]} == {"real.txt"}
    _assert_regular_only(outdir)


H5_PY = r'''
import errno, json, os, stat
def e(f):
    try:
        f(); return "ok"
    except OSError as x:
        return errno.errorcode[x.errno]
out = {}
out["mknod"] = e(lambda: os.mknod("/out/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)))
open("/out/suid", "w").write("#!/bin/sh\nid\n"); os.chmod("/out/suid", 0o6755)
open("/out/sticky", "w").write("s"); os.chmod("/out/sticky", 0o1777)
open("/out/m0", "w").write("zero"); os.chmod("/out/m0", 0)
os.mkdir("/out/d0"); open("/out/d0/inner", "w").write("inner"); os.chmod("/out/d0", 0)
open("/out/xa", "w").write("xattr")
out["user_xattr"] = e(lambda: os.setxattr("/out/xa", "user.evil", b"1"))
out["cap_xattr"] = e(lambda: os.setxattr("/out/xa", "security.capability", b"\x01\x00\x00\x02" + b"\xff" * 16))
print(json.dumps(out))
'''


def test_h5_modes_devices_xattrs(outdir, plain_workdir):
    d = plain_workdir / "naive"
    d.mkdir()
    c = host_py(H5_PY.replace("/out/", f"{d}/"), cwd=str(plain_workdir.path))
    cr = json.loads(c.stdout.decode().splitlines()[-1])
    harness(cr["mknod"] == "ok" and (d / "suid").stat().st_mode & stat.S_ISUID,
            f"control (root): mknod/setuid on a host directory: {cr}")
    os.chmod(d / "d0", 0o755)

    doc = box_bash(_py(H5_PY), "--out", str(outdir))
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    if ON_GVISOR and r["mknod"] == "ok":
        # gVisor's tmpfs makes the node without CAP_MKNOD (the capabilities
        # badge says so); collection must leave it out as not a regular file
        level, detail = badge(doc, "capabilities")
        assert "mknod" in detail and "never one of this host's" in detail, (level, detail)
        assert "null" in {s["path"] for s in doc["skipped"]}, f"device node not reported: {doc['skipped']}"
    else:
        assert r["mknod"] == "EPERM", f"mknod in /out: {r['mknod']}"
    _assert_regular_only(outdir)
    for p, st in _host_tree(outdir).items():
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), \
            f"{p} keeps special mode bits on the host: {stat.filemode(st.st_mode)}"
        full = outdir / p
        if stat.S_ISREG(st.st_mode):
            attrs = os.listxattr(full, follow_symlinks=False)
            assert not attrs, f"{p} carries xattrs on the host: {attrs}"
    collected = {a["path"] for a in doc["artifacts"]}
    skipped = {s["path"] for s in doc["skipped"]}
    for p in ("m0", "d0"):
        assert p in collected or p in skipped or any(s.startswith(p + "/") for s in skipped | collected), \
            f"unreadable entry {p} neither collected nor reported"


H6_SH = r'''
truncate -s 1T /out/big; echo "truncate=$?"
fallocate -l 200M /out/fa 2>&1; echo "fallocate=$?"
dd if=/dev/zero of=/out/dense bs=1M count=40 2>/dev/null; echo "dd=$?"
'''


def test_h6_sparse_and_oversized_files(outdir, plain_workdir):
    c = host_bash(H6_SH.replace("/out/", f"{plain_workdir}/").replace("200M", "1M"))
    harness((plain_workdir / "big").stat().st_size == 1 << 40, f"control: sparse 1T file: {c.stdout!r}")
    (plain_workdir / "big").unlink()
    run = LiveRun("--out", str(outdir), "--max-artifact-size", "16M", "--lang", "bash", "-c", H6_SH)
    doc = run.wait(timeout=60)
    assert_exited(doc)
    assert run.wall < 30
    total = sum(st.st_size for st in _host_tree(outdir).values() if stat.S_ISREG(st.st_mode))
    blocks = sum(st.st_blocks * 512 for st in _host_tree(outdir).values() if stat.S_ISREG(st.st_mode))
    assert total <= 2 * 16 * 1024 * 1024 and blocks <= 2 * 16 * 1024 * 1024, \
        f"host wrote {total} bytes (apparent) / {blocks} (allocated) beyond the per-file cap"
    for a in doc["artifacts"]:
        assert a["size"] <= 16 * 1024 * 1024, f"artifact over the cap: {a}"
    out = dict(l.split("=", 1) for l in doc["stdout"].splitlines() if "=" in l)
    assert out.get("fallocate") != "0", "fallocate beyond the tmpfs cap succeeded"
    big = [s for s in doc["skipped"] if s["path"] in ("big", "dense")] + \
          [a for a in doc["artifacts"] if a["path"] in ("big", "dense")]
    assert big, "oversized files neither truncated nor reported"


H7_PY = r'''
import errno, json, os
out = {}
# depth 5000 through openat chains (the path passes PATH_MAX)
fd = os.open("/out", os.O_RDONLY | os.O_DIRECTORY)
depth = 0
try:
    for i in range(5000):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd); fd = nfd; depth += 1
    with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
        f.write("deep")
except OSError as e:
    out["depth_err"] = errno.errorcode[e.errno]
out["depth"] = depth
os.makedirs("/out/sized")
for i in range(40):
    with open(f"/out/sized/f{i:02d}", "wb") as f:
        f.write(b"s" * (1024 * 1024 - 1))
n = 0
os.makedirs("/out/many")
try:
    for i in range(1_000_000):
        os.close(os.open(f"/out/many/{i}", os.O_WRONLY | os.O_CREAT, 0o644)); n += 1
except OSError as e:
    out["files_err"] = errno.errorcode[e.errno]
out["files"] = n
d = 0
try:
    for i in range(100_000):
        os.mkdir(f"/out/dirs{i}"); d += 1
except OSError as e:
    out["dirs_err"] = errno.errorcode[e.errno]
out["dirs"] = d
print(json.dumps(out))
'''


def test_h7_count_depth_size_bombs(outdir, plain_workdir):
    c = host_py("import os\nfor i in range(20000):\n    open(f'f{i}', 'w').close()\nprint(len(os.listdir('.')))\n",
                uid=NOBODY, cwd=str(plain_workdir.path))
    harness(int(c.stdout.split()[-1]) >= 20000, "control: 20000 files unconfined")
    run = LiveRun("--out", str(outdir), "--max-artifacts", "100", "--max-depth", "16",
                  "--max-artifact-size", "1M", "--max-artifacts-total", "4M", "--timeout", "120",
                  "--lang", "python", "-c", H7_PY)
    doc = run.wait(timeout=200)
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    assert r["files"] < 1_000_000 and r.get("files_err") == "ENOSPC", f"no inode cap on the tmpfs: {r}"
    arts = doc["artifacts"]
    assert len(arts) <= 100, f"{len(arts)} artifacts collected (max 100)"
    assert sum(a["size"] for a in arts) <= 4 * 1024 * 1024, "total-bytes cap exceeded"
    assert all(a["path"].count("/") < 16 for a in arts), "max depth exceeded"
    tree = _host_tree(outdir)
    nfiles = sum(1 for st in tree.values() if stat.S_ISREG(st.st_mode))
    assert nfiles <= 100, f"{nfiles} files written on the host"
    assert max((p.count("/") for p in tree), default=0) < 17, "host tree deeper than max depth"
    assert doc["skipped"], "nothing reported as skipped (no manifest of truncation)"
    assert run.hwm_kb < 256 * 1024, f"airlock VmHWM {run.hwm_kb} kB while collecting"


H8_NAMES_PY = r'''
import json, os
names = [b"a" * 255, b"new\nline", b"cr\rret", b"tab\tx", b"esc\x1b[31mred\x1b]0;t\x07", b"bad\xff\xfeutf8",
         b"-rf", "\u2024\u2024".encode(), "\u2024".encode(), b"back\\slash", b"CON", b"aux", b"A", b"a",
         "\u00e9".encode(), "e\u0301".encode(), b" lead", b"trail ", b"..\xe2\x80\xa8"]
made = []
for n in names:
    try:
        with open(b"/out/" + n, "wb") as f:
            f.write(n)
        made.append(n.hex())
    except OSError as e:
        pass
os.makedirs(b"/out/dir\nname", exist_ok=True)
open(b"/out/dir\nname/..\x1bx", "wb").write(b"x")
print(json.dumps(made))
'''


def test_h8_hostile_names(plain_workdir):
    c = host_py(H8_NAMES_PY.replace('b"/out/', f'b"{plain_workdir}/'), uid=NOBODY, cwd=str(plain_workdir.path))
    harness(len(json.loads(c.stdout.decode().splitlines()[-1])) >= 18, f"control: {c.stderr[-300:]!r}")
    results = []
    for attempt in range(2):
        parent = Path(tempfile.mkdtemp(prefix="airlock-battery-h8-"))
        out = parent / "out"
        try:
            proc = subprocess.run([str(AIRLOCK), "run", "--json", "--out", str(out), "--lang", "python",
                                   "-c", H8_NAMES_PY], capture_output=True, timeout=60)
            raw = proc.stdout
            doc = json.loads(raw)
            assert_exited(doc)
            for b in (b"\x1b", b"\r", b"\x07"):
                assert b not in raw, f"raw {b!r} in the --json manifest"
                assert b not in proc.stderr, f"raw {b!r} in airlock's log output"
            assert sorted(os.listdir(parent)) == ["out"], f"entries created beside --out: {os.listdir(parent)}"
            tree = _host_tree(out)
            for p in tree:
                for comp in p.split("/"):
                    assert comp not in ("", ".", ".."), f"traversal component on the host: {p!r}"
            _assert_regular_only(out)
            results.append((sorted(a["path"] for a in doc["artifacts"]), sorted(tree)))
        finally:
            shutil.rmtree(parent, ignore_errors=True)
    assert results[0] == results[1], "collisions / name mapping not deterministic across runs"


def _make_archives(d):
    d.mkdir(parents=True, exist_ok=True)
    # 42.zip-style nesting
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.bin", b"\0" * (16 << 20))
    data = inner.getvalue()
    for level in range(3):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for i in range(8):
                z.writestr(f"l{level}-{i}.zip", data)
        data = buf.getvalue()
    (d / "42.zip").write_bytes(data)
    # ~10 GB of zeros as concatenated gzip members
    member = gzip.compress(b"\0" * (100 << 20), compresslevel=9)
    (d / "zeros.gz").write_bytes(member * 100)
    # zip-slip
    with zipfile.ZipFile(d / "slip.zip", "w") as z:
        z.writestr("../../etc/airlock-battery-slip", "x")
        z.writestr("/etc/airlock-battery-abs", "x")
        zi = zipfile.ZipInfo("link")
        zi.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(zi, "/etc/passwd")
    # tar with device and hardlink entries
    with tarfile.open(d / "dev.tar", "w") as t:
        ti = tarfile.TarInfo("null-dev")
        ti.type = tarfile.CHRTYPE
        ti.devmajor, ti.devminor = 1, 3
        t.addfile(ti)
        ti = tarfile.TarInfo("hard")
        ti.type = tarfile.LNKTYPE
        ti.linkname = "/etc/passwd"
        t.addfile(ti)
        ti = tarfile.TarInfo("../../etc/airlock-battery-tar")
        ti.size = 1
        t.addfile(ti, io.BytesIO(b"x"))
    return {p.name: sha256_file(p) for p in d.iterdir()}


def test_h9_archive_bombs_not_decompressed(outdir, plain_workdir):
    arch = plain_workdir / "arch"
    hashes = _make_archives(arch)
    # control: a naive host-side extractor does create device nodes / escape
    # (two levels down: the archive's ../../etc entry escapes the
    # extraction, by design, and must land inside the workdir, removed
    # with it, not in the temp directory's parent)
    ex = plain_workdir / "c" / "d" / "ex"
    ex.mkdir(parents=True)
    with tarfile.open(arch / "dev.tar") as t:
        try:
            t.extractall(ex)
        except Exception:
            pass
    harness((ex / "null-dev").exists() and stat.S_ISCHR((ex / "null-dev").lstat().st_mode),
            "control: naive tar extraction did not create the device node")
    assert len(zlib.decompressobj(31).decompress((arch / "zeros.gz").read_bytes()[:1 << 20], 1 << 20)) > 0
    run = LiveRun("--in", str(arch), "--out", str(outdir), "--lang", "bash", "-c", "cp /work/arch/* /out/ && ls -la /out")
    doc = run.wait(timeout=60)
    assert_exited(doc)
    assert run.wall < 20 and run.hwm_kb < 128 * 1024, f"wall {run.wall:.1f}s, VmHWM {run.hwm_kb} kB"
    got = {p.name: sha256_file(p) for p in outdir.iterdir() if p.is_file()}
    assert got == hashes, f"artifacts differ from the archives (decompressed or altered?): {set(got) ^ set(hashes)}"
    assert sorted(_host_tree(outdir)) == sorted(hashes), f"extra entries: {sorted(_host_tree(outdir))}"
    for p in ("/etc/airlock-battery-slip", "/etc/airlock-battery-abs", "/etc/airlock-battery-tar"):
        assert not Path(p).exists(), f"{p} created on the host"
