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


def _immortalize():
    """Every object of this interpreter made immortal, as the interpreter
    makes None, small ints and interned strings (PEP 683): a box's
    interpreter then never writes their reference counts, each write a
    copy of a page of this process (a forked run's page faults, 373 ->
    282 measured; each is dear where the kernel is a guest's). In a box
    these objects are never freed, as they would be by a cold start
    only once nothing held them; sys.getrefcount() of one says so.
    CPython 3.12 and 3.13 built with the GIL and without the debug
    builds' reference tracing (the layout, ob_refcnt first, and the value
    this copies from None are theirs); elsewhere, nothing is done. Every
    object reachable from those the collector tracks: one only C holds
    stays as it was."""
    import gc
    import sys

    # ("t": a free-threaded build, whose objects start with ob_tid;
    # getobjects, gettotalrefcount: a tracing or debug build's)
    if sys.implementation.name != "cpython" or not (3, 12) <= sys.version_info[:2] <= (3, 13) or \
            "t" in sys.abiflags or hasattr(sys, "getobjects") or hasattr(sys, "gettotalrefcount"):
        return
    immortal = ctypes.c_ssize_t.from_address(id(None)).value
    seen, pending = set(), gc.get_objects()
    skip = {id(seen), id(pending)}
    while pending:
        o = pending.pop()
        if id(o) in seen or id(o) in skip:
            continue
        seen.add(id(o))
        count = ctypes.c_ssize_t.from_address(id(o))
        # (one immortal already, a static one among them, is not written)
        if ctypes.c_int32(count.value).value >= 0:
            count.value = immortal
        pending.extend(gc.get_referents(o))


def serve():
    import gc
    slots = int(os.environ.pop("AIRLOCK_ZYGOTE_SLOTS"))
    # PyDLL: the loop holds the interpreter's lock, and wraps each clone
    # in the interpreter's own fork sequence
    loop = ctypes.PyDLL("/work/_airlock_fork.so").al_zygote_serve
    loop.restype = ctypes.c_int
    loop.argtypes = [ctypes.c_int, ctypes.c_int]
    _immortalize()
    # this interpreter's objects kept out of its boxes' collections (each
    # would touch, so copy, the pages of all of them)
    gc.freeze()
    r = loop(int(os.environ["AIRLOCK_WARM_FD"]), slots)
    if r < 0:
        raise OSError(-r, "the zygote's loop: " + os.strerror(-r))
    # in a box's run process from here
