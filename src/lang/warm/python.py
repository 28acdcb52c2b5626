# airlock's warm start for Python (issue 14). A pooled box runs
# `python3 main.py` with this file as /work/main.py, before any run is
# known: the interpreter starts, the preload modules are imported, and it
# waits on the fd AIRLOCK_WARM_FD names (a Unix socket from the box's
# parent) for its run. At hand-off the parent has replaced main.py with the
# run's code, and the message on it holds the run's arguments and environment, with the run's
# stdin as a passed fd. The run's code then runs as __main__ as `python3
# main.py ARGS` would run it: the interpreter, sys.argv[0], sys.path, the
# cwd and __main__'s __file__, __spec__ and __loader__ are a cold start's
# own, because this was that start.
#
# Its own names all start with "_" and are gone from __main__'s namespace
# before the run's code runs; the preloaded modules stay in sys.modules.


# what a cold start has imported when its script's first line runs
_base = frozenset(__import__("sys").modules)

def _shadowed(loaded):
    """Whether the run's files in /work (sys.path[0], the script's own
    directory, where a cold start's imports look first) name one of LOADED,
    the modules this warm start or its preloads imported and a cold start
    had not: a cold run's `import NAME` would get its own file, a warm
    one the module already loaded."""
    import _imp
    import os
    import sys

    suffixes = (".py", ".pyc", *_imp.extension_suffixes())
    # (closed as it returns: no fd of the warm start's is left to the run)
    with os.scandir(sys.path[0]) as entries:
        for entry in entries:
            name = entry.name if entry.is_dir(follow_symlinks=False) else \
                next((entry.name[:-len(s)] for s in suffixes if entry.name.endswith(s)), None)
            if name in loaded:
                return True
    return False


def _loaded(base):
    """The preloads imported; the modules this warm start or its preloads
    imported and a cold start (BASE) had not, by top-level name."""
    # the warm start's own (_warm's and _end's), imported before any run:
    # in a zygote, once for all its boxes (not threading: a cold start has
    # not imported it, and its after-fork handler wrote some 35 pages of
    # every forked box, measured)
    import _socket, atexit, gc, io  # noqa: F401,E401
    import os
    import sys

    for name in filter(None, os.environ.get("AIRLOCK_PRELOAD", "").split(",")):
        try:
            __import__(name)
        except Exception:
            # a module that does not import is imported (and fails) in the
            # run's own time, as on a cold start
            sys.modules.pop(name, None)
    # (one built into the interpreter is found before /work is looked in:
    # no file of a run's shadows it)
    return frozenset(m.partition(".")[0] for m in sys.modules) - frozenset(m.partition(".")[0] for m in base) - \
        frozenset(sys.builtin_module_names)


def _warm(loaded):
    import _socket
    import os
    import sys

    # _socket's own type, not socket.socket and its recv_fds: less of the
    # interpreter run, and so fewer of its pages copied, in a forked box
    chan = _socket.socket(fileno=int(os.environ["AIRLOCK_WARM_FD"]))
    chan.sendall(b"r")
    # the run: its length and a newline, then NUL-terminated strings (the
    # number of its arguments, its arguments, its environment), its stdin
    # a passed fd with the first bytes (src/box/box.c, warm_message); read
    # and parsed before it is taken, so that what fails here (its parent's
    # end) sends the run cold, not as the run's error
    msg, anc, _, _ = chan.recvmsg(4096, _socket.CMSG_LEN(4))
    fds = [int.from_bytes(d[:4], sys.byteorder) for level, kind, d in anc
           if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(d) >= 4]
    while b"\n" not in msg:
        more = chan.recv(65536)
        if not more:
            os._exit(125)
        msg += more
    head, _, msg = msg.partition(b"\n")
    size, parts = int(head), [msg]
    have = len(msg)
    while have < size:
        parts.append(chan.recv(size - have))
        if not parts[-1]:
            os._exit(125)
        have += len(parts[-1])
    fields = [os.fsdecode(f) for f in b"".join(parts).split(b"\0")[:-1]]
    nargs = int(fields[0])
    args, env = fields[1:1 + nargs], fields[1 + nargs:]
    if _shadowed(loaded):
        # its run goes cold (the box's parent ends this one)
        chan.sendall(b"c")
        os._exit(0)
    # "got it": before any of the run's code (the box's parent waits for it)
    chan.sendall(b"g")
    chan.close()
    if fds:
        # fd 0 is the run's stdin now; sys.stdin read nothing yet
        os.dup2(fds[0], 0)
        os.close(fds[0])
    # the run's environment, in its order ("NAME=value" strings); the
    # warm start's is unset as os.environ.clear() would, without its
    # Python for each name
    for k in list(os.environ._data):
        os.unsetenv(k)
    os.environ._data.clear()
    for kv in env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    sys.argv[1:] = args
    sys.orig_argv[2:] = args
    with open(__file__, "rb") as f:
        source = f.read()
    # what the preloads made is set aside: the run's collections, and the
    # scan of its open files at its end, see only what the run makes
    __import__("gc").freeze()
    try:
        return compile(source, __file__, "exec", dont_inherit=True)
    except SyntaxError as e:
        # as the interpreter reports a script it cannot compile: no frame
        # (the hook prints the exception's own traceback, not its argument)
        sys.excepthook(type(e), e.with_traceback(None), None)
        sys.exit(1)


def _end(code):
    # The interpreter's own end for a run that ended or called sys.exit,
    # without the module teardown that costs a warm start ~300 ms with its
    # preloads at 0.5 CPU. What a run can see of that end is done in
    # Py_FinalizeEx's order: a SystemExit's message, non-daemon threads
    # joined, atexit (and so weakref.finalize, logging, multiprocessing),
    # __main__'s objects released (their __del__ run, their files flushed),
    # every open file flushed, stdio flushed; then the exit status.
    import gc
    import io
    import os
    import sys

    status = 0
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        try:
            print(code, file=sys.stderr)
        except Exception:
            pass
        status = 1
    # (as Py_FinalizeEx: only if the run, or a preload, imported it)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    __import__("atexit")._run_exitfuncs()
    main = sys.modules["__main__"].__dict__
    for k in [k for k in main if k != "__builtins__"]:
        del main[k]
    gc.collect()
    for o in gc.get_objects():
        try:
            if isinstance(o, io.IOBase) and not o.closed and o not in (sys.stdout, sys.stderr):
                o.flush()
        except Exception:
            pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(status)


if "AIRLOCK_ZYGOTE_SLOTS" in __import__("os").environ:
    # a zygote (zygote.py): what each of its boxes would work out for
    # itself worked out once, here (each page a box's interpreter writes
    # is a copy); then boxes are forked from here, and in each serve
    # returns, the box's interpreter then going on as any warm box's
    _z = __import__("_airlock_zygote")
    # (its module leaves sys.modules in each box)
    _l = _loaded(_base) - {"_airlock_zygote"}
    _z.serve()
    del _z
    del __import__("sys").modules["_airlock_zygote"]
else:
    _l = _loaded(_base)
_c = _warm(_l)
del _warm, _shadowed, _loaded, _base, _l
# kept out of __main__'s namespace, which is the run's from here
__import__("sys").__dict__["_airlock_end"] = _end
del _end
# the run's code runs from this frame, the only one of airlock's beneath it
try:
    exec(globals().pop("_c"), globals())
except SystemExit as _e:
    __import__("sys").__dict__.pop("_airlock_end")(globals().pop("_e").code)
except BaseException as _e:  # noqa: B902 (what the interpreter's top level catches)
    # reported from the run's own frames on (this frame is airlock's), by
    # the hook the run may have set, then left to the interpreter's own end
    # as an uncaught exception (exit 1, or SIGINT's for a
    # KeyboardInterrupt), with nothing more to print
    _e.with_traceback(_e.__traceback__.tb_next)
    __import__("sys").excepthook(type(_e), _e, _e.__traceback__)
    __import__("sys").excepthook = lambda *a: None
    raise
else:
    __import__("sys").__dict__.pop("_airlock_end")(None)
