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
# gone. The clone is made by al_fork_box (src/box/fork_init.c, staged as
# /work/_airlock_fork.so), in C: it builds what a cold box's PID 1 builds,
# with the same code (src/box/setup.c), stays the box's PID 1 without
# going back into this interpreter (whose pages each cost a copy once a
# fork touches them), and forks the run's process, which has dropped
# every capability, set no_new_privs, loaded airlock's seccomp filter and
# returns here, into python.py's warm start, as a warm box's interpreter.
#
# What its boxes share, being forks of one process: the pages of this
# interpreter as it was before any box (copy-on-write), its address
# layout and its hash seed. Nothing of one box reaches another: each
# box's memory is its own from its first write, and this process never
# runs or sees a box's code.

import ctypes
import json
import os
import select
import socket
import struct

_api = ctypes.pythonapi
_SANDBOX_ID = 65534
# src/box/proto.h's al_msg: type, status, al_error {step[48], err, msg[512]}
_MSG = struct.Struct("=Ii48si512s")
_MSG_ERROR = 3


class _Args(ctypes.Structure):
    """fork_init.c's al_fork_args."""
    _fields_ = [("sync", ctypes.c_int32), ("out", ctypes.c_int32), ("err", ctypes.c_int32),
                ("chan", ctypes.c_int32), ("go", ctypes.c_int32),
                ("tmpfs_bytes", ctypes.c_uint64), ("tmpfs_inodes", ctypes.c_uint64),
                ("pids", ctypes.c_uint64), ("nofile", ctypes.c_uint64)]


def _fail(fd, step, err, msg):
    """A request's failure, on its sync socket FD (which stays open)."""
    s = socket.socket(fileno=fd)
    try:
        s.send(_MSG.pack(_MSG_ERROR, 0, step.encode()[:47], err, msg.encode()[:511]))
    except OSError:
        pass
    s.detach()


class _Zygote:
    def __init__(self):
        lib = ctypes.CDLL("/work/_airlock_fork.so", use_errno=True)
        self.fork_box = lib.al_fork_box
        self.fork_box.restype = ctypes.c_long
        self.fork_box.argtypes = [ctypes.POINTER(_Args)]
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
        args = _Args(fds[0], fds[1], fds[2], fds[3], go_r, limits["tmpfs_bytes"], limits["tmpfs_inodes"],
                     limits["pids"], limits["nofile"])
        # os.fork's own sequence, around the clone (its PID 1 never comes
        # back here; the run's process, forked from it, does)
        _api.PyOS_BeforeFork()
        pid = self.fork_box(ctypes.byref(args))
        if pid == 0:
            _api.PyOS_AfterFork_Child()
            # its fds are gone: the socket objects forget theirs
            req.detach()
            # nothing of the other boxes' stays in this one's memory
            self.kids.clear()
            self.slots.clear()
            return True
        _api.PyOS_AfterFork_Parent()
        os.close(go_r)
        if pid < 0:
            self.slots.append(slot)
            os.close(go_w)
            return _fail(fds[0], "clone", -pid, "clone new namespaces: " + os.strerror(-pid))
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
                ok = ok and all(isinstance(limits.get(k), int) and limits[k] >= 0
                                for k in ("tmpfs_bytes", "tmpfs_inodes", "pids", "nofile"))
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
