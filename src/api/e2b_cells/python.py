# The code interpreter's cell, run as an airlock run (src/api/e2b_execute.c).
# The service puts one line above this: _AIRLOCK = "<base64 of JSON>", the
# cell's code, its environment and the mark that starts a line of results.
# Results leave on stdout as "<mark><JSON>\n" lines: the run's output caps
# and DLP cover them as they cover what the cell prints, and the service
# splits them from the cell's own output. A cell is a fresh interpreter:
# nothing of an earlier cell is kept but the files in /home/user (= /work).
import ast
import base64
import json
import os
import sys
import traceback

_A = json.loads(base64.b64decode(_AIRLOCK))  # noqa: F821 (the line above)
os.environ.update(_A["env"])
_MARK = _A["mark"]


def _emit(doc):
    sys.stdout.flush()
    sys.stderr.flush()
    sys.__stdout__.write(_MARK + json.dumps(doc) + "\n")
    sys.__stdout__.flush()


def _text(v):
    # as the upstream server shows text/plain: a string's quotes stripped
    t = repr(v)
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        t = t[1:-1]
    return t


def _figures():
    """Every figure left open, as a PNG result; then closed (as a shown one is)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    import io
    for n in plt.get_fignums():
        fig = plt.figure(n)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        _emit({"type": "result", "text": repr(fig), "png": base64.b64encode(buf.getvalue()).decode(),
               "is_main_result": False})
    plt.close("all")


# plt.show() shows as the notebook does: a backend of our own (Agg's, but for
# show), written where the cell's files are not
_BACKEND = "/tmp/_airlock_mpl_backend.py"
with open(_BACKEND, "w") as f:
    f.write("from matplotlib.backends.backend_agg import *  # noqa\n"
            "from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas  # noqa\n"
            "def show(*args, **kwargs):\n"
            "    import __main__\n"
            "    __main__._figures()\n")
sys.path.append("/tmp")
os.environ["MPLBACKEND"] = "module://_airlock_mpl_backend"


# A name an earlier cell defined is not here (each cell is a fresh
# interpreter): the error says so, so that an agent learns why and keeps
# what it needs in files rather than retrying the same cell.
_NOT_KEPT = (" (airlock: each runCode call runs in a fresh interpreter; variables, imports and"
             " processes of earlier calls are not kept, files under /home/user are)")


def _error(e):
    value = str(e)
    if isinstance(e, NameError):
        value += _NOT_KEPT
    _emit({"type": "error", "name": type(e).__name__, "value": value,
           "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__))})


def _run(cell):
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        tree = ast.parse(cell, "<cell>", "exec")
    except SyntaxError as e:
        _error(e)
        return
    last = None
    # a trailing expression is the cell's value, as IPython's
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    try:
        exec(compile(tree, "<cell>", "exec"), g)
        value = eval(compile(last, "<cell>", "eval"), g) if last is not None else None
    except BaseException as e:  # noqa: B902 (SystemExit and KeyboardInterrupt are the cell's errors too)
        _figures()
        _error(e)
        return
    _figures()
    if value is not None:
        _emit({"type": "result", "text": _text(value), "is_main_result": True})


_run(_A["cell"])
