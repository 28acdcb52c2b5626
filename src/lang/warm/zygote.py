# airlock's fork server for Python (issue 14): the zygote. A pooled box
# can be forked from this process instead of being made and started:
# its interpreter's start, the 10 ms of CPU every Python box pays, was
# paid once, here. This runs in a box of its own (src/box: a zygote
# box), which has seen no code and no input, as uid 0 of that box's user
# namespace with only CAP_SETUID and CAP_SETGID, its root read-only, its
# /proc in full; python.py imports it as the box's script starts, and
# serve() returns only in a fork.
#
# The request socket (AIRLOCK_WARM_FD, SOCK_SEQPACKET) carries one
# request per box: its limits (JSON) with four fds, the box's sync socket
# to its parent (src/box/box.c), its stdout and stderr pipes, and its
# warm start's socket. Each box is a clone into new user, mount, pid, net,
# ipc and uts namespaces, whose user namespace maps only uid and gid 65534,
# to one of this box's own uids (a slot, AIRLOCK_ZYGOTE_SLOTS of them,
# each a host uid of its own), reused only once the box that had it is
# gone. The clone then builds what a cold box's PID 1 builds (child.c),
# in the same order and speaking the same messages to its parent: fresh
# tmpfs /work, /out, /tmp and /dev/shm, its own /proc of its processes,
# loopback, hostname, no nested user namespaces, its cgroup (its parent
# moves it), rlimits, a new session; it stays the box's PID 1, and forks
# the run's process, which drops every capability, sets no_new_privs,
# loads airlock's seccomp filter (/work/seccomp.bpf, from box.c) and
# returns into python.py's warm start, as a warm box's interpreter.
#
# What its boxes share, being forks of one process: the pages of this
# interpreter as it was before any box (copy-on-write), its address
# layout and its hash seed. Nothing of one box reaches another: each
# box's memory is its own from its first write, and this process never
# runs or sees a box's code.

import ctypes
import json
import os
import platform
import resource
import select
import signal
import socket
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_api = ctypes.pythonapi

_NEWNS, _NEWCGROUP, _NEWUTS, _NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
_NEWUSER, _NEWPID, _NEWNET = 0x10000000, 0x20000000, 0x40000000
_SIGCHLD = 17
# clone, capget, capset, seccomp
_SYSCALLS = {"x86_64": (56, 125, 126, 317), "aarch64": (220, 90, 91, 277)}
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_PR_SET_DUMPABLE, _PR_SET_KEEPCAPS, _PR_SET_NAME = 4, 8, 15
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 24, 38, 47
_SANDBOX_ID = 65534
# src/box/proto.h's al_msg: type, status, al_error {step[48], err, msg[512]}
_MSG = struct.Struct("=Ii48si512s")
_MSG_GO, _MSG_FDS, _MSG_ERROR, _MSG_STATUS = 1, 2, 3, 4


class _Step(Exception):
    def __init__(self, step, err, msg):
        super().__init__(msg)
        self.step, self.err = step, err


def _check(r, step, what):
    if r < 0:
        e = ctypes.get_errno()
        raise _Step(step, e, "%s: %s" % (what, os.strerror(e)))
    return r


def _send(sock, kind, status=0, fds=(), step="", err=0, msg=""):
    m = _MSG.pack(kind, status, step.encode()[:47], err, msg.encode()[:511])
    socket.send_fds(sock, [m], list(fds)) if fds else sock.send(m)


def _fail(fd, step, err, msg):
    """A request's failure, on its sync socket FD (which stays open)."""
    s = socket.socket(fileno=fd)
    try:
        _send(s, _MSG_ERROR, step=step, err=err, msg=msg)
    except OSError:
        pass
    s.detach()


def _scrub_cmdline():
    """child.c's scrub_cmdline: PID 1's argv and environment, readable in
    /proc/1, are the zygote's; blanked, but for a name."""
    with open("/proc/self/stat") as f:
        stat = f.read()
    v = stat[stat.rindex(")") + 2:].split()  # fields from the third on
    a0, a1, e0, e1 = (int(v[i - 3]) for i in (48, 49, 50, 51))
    if 0 < a0 < a1 and a1 - a0 < 1 << 24:
        ctypes.memset(a0, 0, a1 - a0)
        if a1 - a0 > 13:
            ctypes.memmove(a0, b"airlock-init", 12)
    if 0 < e0 < e1 and e1 - e0 < 1 << 24:
        ctypes.memset(e0, 0, e1 - e0)


def _recv(sock):
    """A message's type and the fds it passed."""
    m, fds, _, _ = socket.recv_fds(sock, _MSG.size, 8)
    if len(m) != _MSG.size:
        raise _Step("sync", 32, "parent went away")
    return _MSG.unpack(m)[0], fds


class _Filter:
    """airlock's two seccomp programs, as box.c wrote them: for each, its
    length (u16) and its instructions (8 bytes each)."""

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    def __init__(self, data):
        self.bufs, self.progs, at = [], [], 0
        for _ in range(2):
            (n,) = struct.unpack_from("=H", data, at)
            at += 2
            buf = ctypes.create_string_buffer(data[at:at + 8 * n], 8 * n)
            at += 8 * n
            self.bufs.append(buf)
            self.progs.append(self._Prog(n, ctypes.addressof(buf)))
        if at != len(data):
            raise ValueError("seccomp.bpf: trailing bytes")

    def load(self, nr):
        # the ioctl filter first: the allow-list, once loaded, would refuse
        # seccomp() itself (seccomp.c)
        for i in (1, 0):
            _check(_libc.syscall(nr, 1, 1, ctypes.byref(self.progs[i])), "seccomp", "load filter")


class _Caps:
    class _Hdr(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    def __init__(self, nr_get, nr_set):
        self.nr_get, self.nr_set = nr_get, nr_set

    def _call(self, nr, data):
        hdr = self._Hdr(0x20080522, 0)
        _check(_libc.syscall(nr, ctypes.byref(hdr), data), "capabilities", "capget/capset")

    def effective_is_permitted(self):
        d = (self._Data * 2)()
        self._call(self.nr_get, d)
        for x in d:
            x.effective = x.permitted
        self._call(self.nr_set, d)

    def drop_all(self):
        # child.c's drop_privileges: no_new_privs, the bounding set (EINVAL
        # past the kernel's last capability ends it), ambient, then none
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs", "PR_SET_NO_NEW_PRIVS")
        for c in range(64):
            if _libc.prctl(_PR_CAPBSET_DROP, c, 0, 0, 0) < 0:
                if ctypes.get_errno() == 22:
                    break
                _check(-1, "capabilities", "drop bounding cap %d" % c)
        _libc.prctl(_PR_CAP_AMBIENT, 4, 0, 0, 0)
        self._call(self.nr_set, (self._Data * 2)())
        _libc.prctl(_PR_SET_KEEPCAPS, 0, 0, 0, 0)


def _mount(src, target, fstype, flags, data):
    r = _libc.mount(src, target.encode(), fstype, flags, data.encode() if data else None)
    _check(r, "mount", "mount %s on %s" % (fstype.decode() if fstype else "", target))


def _loopback_up():
    import fcntl
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0))  # SIOCGIFFLAGS
        flags = struct.unpack("16sH14x", ifr)[1] | 1  # IFF_UP
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags))  # SIOCSIFFLAGS


def _keep_fds(keep):
    """Close every fd but KEEP (child.c's keep_only_own_fds)."""
    at = 0
    # never an empty range: os.closerange(0, 0) closes every fd
    for fd in sorted(keep) + [resource.getrlimit(resource.RLIMIT_NOFILE)[0]]:
        if fd > at:
            os.closerange(at, fd)
        at = fd + 1


def _box(z, req, sync, out, err_pipe, chan, limits, go_r):
    """In the clone, PID 1 of the box's namespaces. Returns only in the
    run's process, with its stdio and warm start's socket in place."""
    tmpfs_bytes, inodes = int(limits["tmpfs_bytes"]), int(limits["tmpfs_inodes"])
    pids, nofile = int(limits["pids"]), int(limits["nofile"])
    try:
        # nothing of the zygote's: its socket object forgets its fd (closed
        # with the rest below), and its map written, the box goes on
        req.detach()
        os.read(go_r, 1)
        _keep_fds({sync.fileno(), out, err_pipe, chan})
        # identity first: what the box makes is owned by its own uid
        _check(_libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0), "identity", "PR_SET_KEEPCAPS")
        os.setresgid(_SANDBOX_ID, _SANDBOX_ID, _SANDBOX_ID)
        os.setresuid(_SANDBOX_ID, _SANDBOX_ID, _SANDBOX_ID)
        z.caps.effective_is_permitted()
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
        _check(_libc.sethostname(b"airlock", 7), "hostname", "sethostname")
        _loopback_up()
        # through the zygote's /proc, before the box's own covers it
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
        opts = "size=%d,nr_inodes=%d,uid=%d,gid=%d,mode=" % (tmpfs_bytes, inodes, _SANDBOX_ID, _SANDBOX_ID)
        for d, mode, extra in (("/work", "755", 0), ("/out", "755", 0), ("/tmp", "1777", 0),
                               ("/dev/shm", "1777", _MS_NOEXEC)):
            _mount(b"tmpfs", d, b"tmpfs", _MS_NOSUID | _MS_NODEV | extra, opts + mode)
        _mount(b"proc", "/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "subset=pid")
        # sync 2: scratch fds sent, with a pidfd of this process (its
        # parent reads its pid and uids from the message, the kernel's word)
        dirs = [os.open(d, os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC) for d in ("/work", "/out", "/tmp")]
        dirs.append(os.pidfd_open(os.getpid()))
        _send(sync, _MSG_FDS, fds=dirs)
        for d in dirs:
            os.close(d)
        kind, join = _recv(sync)                         # sync 3: inputs staged, cgroup made
        # join it at once, through the fds its parent opened (child.c's
        # wait_go_and_join)
        try:
            if kind != _MSG_GO:
                raise _Step("sync", 71, "parent went away")
            for fd in join:
                os.write(fd, b"0")
        except OSError as e:
            raise _Step("cgroup", e.errno or 5, "join the box's cgroup: %s" % e)
        finally:
            for fd in join:
                os.close(fd)
        _check(_libc.unshare(_NEWCGROUP), "cgroupns", "unshare(CLONE_NEWCGROUP)")
        os.chdir("/work")
        for res, v in ((resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_FSIZE, tmpfs_bytes),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, pids + 16)):
            resource.setrlimit(res, (v, v))
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        # PID 1's end of the work: its argv and environment blanked (the
        # script's process, forked after, keeps its own)...
        _libc.prctl(_PR_SET_NAME, b"airlock", 0, 0, 0)
        wake, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # ...and privileges go and the filter comes before the script's
        # process is forked, which inherits both (as a cold box's PID 1
        # loads it before it spawns the script)
        z.caps.drop_all()
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        z.filter.load(z.nr_seccomp)
        # a SIGCHLD between the fork and the handler is not lost: the
        # first reap comes before the first wait
        script = os.fork()
        if script == 0:
            try:
                for i, fd in enumerate((null, out, err_pipe)):
                    os.dup2(fd, i)
                os.dup2(chan, 63)
                _keep_fds({0, 1, 2, 63})
                # as a cold box's script, which its exec made dumpable
                # again, named as its interpreter
                _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
                _libc.prctl(_PR_SET_NAME, b"python3", 0, 0, 0)
            except BaseException:
                # never on into the warm start half set up
                os._exit(125)
            return
        for fd in (null, out, err_pipe, chan):
            os.close(fd)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        os.set_blocking(sync.fileno(), False)
        _scrub_cmdline()
    except _Step as e:
        _send(sync, _MSG_ERROR, step=e.step, err=e.err, msg=str(e))
        os._exit(125)
    except OSError as e:
        _send(sync, _MSG_ERROR, step="zygote", err=e.errno or 5, msg=str(e))
        os._exit(125)
    # PID 1 (child.c's be_init): reaps every process that ends (a SIGCHLD
    # wakes it), reports the script's status, and its end takes the
    # namespace down; the end of the sync socket (the box's parent gone)
    # ends it too
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(125)
            if pid == 0:
                break
            if pid == script:
                _send(sync, _MSG_STATUS, status=status)
                os._exit(0)
        r, _, _ = select.select([sync, wake], [], [])
        if sync in r:
            try:
                if not sync.recv(_MSG.size):
                    os._exit(0)
            except BlockingIOError:
                pass
        if wake in r:
            while True:
                try:
                    os.read(wake, 512)
                except BlockingIOError:
                    break


class _Zygote:
    def __init__(self):
        nrs = _SYSCALLS.get(platform.machine())
        if not nrs:
            raise SystemExit("zygote: no clone for %s" % platform.machine())
        self.nr_clone, self.nr_seccomp = nrs[0], nrs[3]
        self.caps = _Caps(nrs[1], nrs[2])
        with open("/work/seccomp.bpf", "rb") as f:
            self.filter = _Filter(f.read())
        self.slots = list(range(int(os.environ.pop("AIRLOCK_ZYGOTE_SLOTS")), 0, -1))
        self.kids = {}

    def reap(self):
        while self.kids:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.kids.pop(pid, None)
            if slot:
                self.slots.append(slot)

    def clone(self, req, fds, limits):
        """A box for the request whose fds are FDS; True in its script's
        process, None here (FDS still to close)."""
        if not self.slots:
            return _fail(fds[0], "zygote", 11, "every uid of the zygote is in use")
        slot = self.slots.pop()
        go_r, go_w = os.pipe()
        flags = _NEWUSER | _NEWNS | _NEWPID | _NEWNET | _NEWIPC | _NEWUTS | _SIGCHLD
        # os.fork's own sequence, around a clone into new namespaces
        _api.PyOS_BeforeFork()
        pid = _libc.syscall(self.nr_clone, flags, 0, 0, 0, 0)
        if pid == 0:
            _api.PyOS_AfterFork_Child()
            os.close(go_w)
            # nothing of the other boxes' stays in this one's memory
            self.kids.clear()
            self.slots.clear()
            sync = socket.socket(fileno=fds[0])
            _box(self, req, sync, fds[1], fds[2], fds[3], limits, go_r)
            sync.detach()  # closed with the rest: not again when collected
            return True
        e = ctypes.get_errno()
        _api.PyOS_AfterFork_Parent()
        os.close(go_r)
        if pid < 0:
            self.slots.append(slot)
            os.close(go_w)
            return _fail(fds[0], "clone", e, "clone new namespaces: " + os.strerror(e))
        self.kids[pid] = slot
        try:
            with open("/proc/%d/setgroups" % pid, "w") as f:
                f.write("deny")
            for m in ("uid_map", "gid_map"):
                with open("/proc/%d/%s" % (pid, m), "w") as f:
                    f.write("%d %d 1\n" % (_SANDBOX_ID, slot))
            os.write(go_w, b"g")
        except OSError as ex:
            os.kill(pid, 9)
            _fail(fds[0], "userns", ex.errno or 5, "write the box's maps: %s" % ex)
        finally:
            os.close(go_w)

    def serve(self):
        req = socket.socket(fileno=int(os.environ["AIRLOCK_WARM_FD"]))
        # what every box's warm start imports at its end, imported once
        # here; and this interpreter's objects kept out of its boxes'
        # collections (each would touch, so copy, the pages of all of them)
        import atexit, gc, io, threading  # noqa: F401,E401
        gc.freeze()
        while True:
            select.select([req], [], [], 1.0)
            self.reap()
            try:
                msg, fds, _, _ = socket.recv_fds(req, 4096, 4, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            if not msg and not fds:
                # the pool is done with it; its boxes live on (the zygote
                # box's PID 1 reaps them), and its uids with them
                os._exit(0)
            ok = len(fds) == 4
            try:
                limits = json.loads(msg) if ok else None
                ok = ok and all(isinstance(limits.get(k), int) for k in ("tmpfs_bytes", "tmpfs_inodes", "pids", "nofile"))
            except (ValueError, AttributeError):
                ok = False
            if not ok and fds:
                # said, not left to the box's setup timeout
                _fail(fds[0], "zygote", 22, "a request the zygote cannot read")
            if ok and self.clone(req, fds, limits):
                return
            for fd in fds:
                os.close(fd)


def serve():
    _Zygote().serve()
