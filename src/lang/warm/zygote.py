# airlock's fork server for Python (issue 14): the zygote. A pooled box
# can be forked from this process instead of being made and started:
# its interpreter's start, the 10 ms of CPU every Python box pays, was
# paid once, here. This runs in a box of its own (src/box: a zygote
# box), which has seen no code and no input, as uid 0 of that box's user
# namespace with only CAP_SETUID and CAP_SETGID, its root read-only, its
# /proc in full; python.py imports it as the box's script starts, and
# serve() returns only in a fork.
#
# The loop that serves the request socket (AIRLOCK_WARM_FD, one request
# per box) is C, src/box/zygote.c in /work/_airlock_fork.so: written here
# it would touch, so copy, pages of this interpreter after every fork.
# Each box is a clone into new user, mount, pid, net, ipc and uts
# namespaces, whose user namespace maps only uid and gid 65534, to one of
# this box's own uids (a slot, AIRLOCK_ZYGOTE_SLOTS of them, each a host
# uid of its own), reused only once the box that had it is gone. The
# clone (src/box/fork_init.c) builds what a cold box's PID 1 builds, with
# the same code (src/box/setup.c), stays the box's PID 1 without going
# back into this interpreter, and forks the run's process, which has
# dropped every capability, set no_new_privs, loaded airlock's seccomp
# filter and returns here, into python.py's warm start, as a warm box's
# interpreter.
#
# What its boxes share, being forks of one process: the pages of this
# interpreter as it was before any box (copy-on-write), its address
# layout and its hash seed. Nothing of one box reaches another: each
# box's memory is its own from its first write, and this process never
# runs or sees a box's code.

import ctypes
import os


def serve():
    import gc
    slots = int(os.environ.pop("AIRLOCK_ZYGOTE_SLOTS"))
    # PyDLL: the loop holds the interpreter's lock, and wraps each clone
    # in the interpreter's own fork sequence
    loop = ctypes.PyDLL("/work/_airlock_fork.so").al_zygote_serve
    loop.restype = ctypes.c_int
    loop.argtypes = [ctypes.c_int, ctypes.c_int]
    # this interpreter's objects kept out of its boxes' collections (each
    # would touch, so copy, the pages of all of them)
    gc.freeze()
    r = loop(int(os.environ["AIRLOCK_WARM_FD"]), slots)
    if r < 0:
        raise OSError(-r, "the zygote's loop: " + os.strerror(-r))
    # in a box's run process from here
