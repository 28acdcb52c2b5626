#!/usr/bin/env python3
"""The layering of src/ (docs/architecture.md, "The layers"), checked on the
sources in seconds, without root and with the standard library alone.
`meson test` runs it (tests/tools/meson.build); so can anyone:

    python3 tests/tools/check_layers.py [SRC_DIR]

It fails, naming file and line, on:

1. SQL, or the store's insides, outside src/store; HTTP in src/core (no
   libmicrohttpd, no status code returned, refused with or compared: the
   core answers in al_status, which src/api maps).
2. An include across the layering: a file includes its own layer's headers,
   the layers DIRECTLY below its own (EDGES) and util, nothing else.
3. A function over 150 lines in src/core or src/api (from the first line of
   its declaration to its closing brace at column 0), a file over 1,000
   lines in src/api (as `wc -l` counts).
4. A circle of files calling each other within src/core, src/drivers, src/remote or src/docker: A
   calls B when A names a function or global that B defines and does not
   keep static. Each circle is reported with the names that tie it.

What breaks a rule today is listed below, each with why, in the EXCEPTIONS
tables; an exception that is no longer needed fails the check too, so the
lists only shrink. Fix the code rather than add to them.
"""
import re
import sys
from pathlib import Path

# ------------------------------------------------------------ the map

# layer -> the layers directly below it, the only ones it may include from
# (besides its own headers and util, which every layer may include).
EDGES = {
    "util": set(),
    "lang": set(),
    "store": set(),
    "proxy": set(),
    "box": set(),
    "image": {"box"},
    "docker": {"box"},
    "remote": {"box"},
    "kube": {"box", "remote"},
    "drivers": {"box", "docker", "image", "kube", "lang", "proxy", "remote"},
    "core": {"drivers", "store"},
    "api": {"core"},
    "cli": {"api", "core", "drivers", "kube"},
}

MAX_FUNCTION_LINES = 150
FUNCTION_LAYERS = ("core", "api")
MAX_FILE_LINES = 1000
FILE_LAYERS = ("api",)
CIRCLE_LAYERS = ("core", "drivers", "remote", "docker", "kube")

# ------------------------------------------------------------ exceptions
# Each entry is what breaks a rule today and why it is allowed for now. The
# check fails when an entry is no longer needed: delete it then.

# "file: layer/header" -> why
INCLUDE_EXCEPTIONS = {
    # the CLI's admin and local MCP open the store themselves
    "cli/admin.c: store/governance.h": "`airlock admin` writes tenants and keys on the store with no service running",
    "cli/admin.c: store/tenants.h": "`airlock admin` writes tenants and keys on the store with no service running",
    "cli/mcp_local.c: store/store.h": "`airlock mcp --local` keeps a store of its own",
    "cli/mcp_local.c: store/tenants.h": "`airlock mcp --local` keeps a store of its own",
    # `airlock run`, `image` and `doctor` drive the box directly (the
    # helper's work is the drivers' now: drivers/helper_main.c)
    "cli/cli.h: box/box.h": "`airlock run` calls the box directly, with no service and no driver",
    "cli/cli.h: lang/lang.h": "`airlock run` picks the language itself",
    "cli/doctor.c: box/doctor.h": "`airlock doctor` asks the box what the host allows",
    "cli/doctor.c: docker/docker.h": "`airlock doctor` probes dockerd",
    "cli/doctor.c: image/image.h": "`airlock doctor` lists the images",
    "cli/doctor.c: proxy/policy.h": "`airlock doctor` checks the proxy's policy",
    "cli/fork.c: image/image.h": "`airlock run --fork` starts a zygote on an image",
    "cli/fork.c: lang/lang.h": "`airlock run --fork` picks the language itself",
    "cli/image.c: box/collect.h": "`airlock image import` reads archives beneath its tree with the box's collector",
    "cli/image.c: image/image.h": "`airlock image` is the image layer's command",
    "cli/image.c: image/export.h": "`airlock image export` is the image layer's command too (airlock-server only: it links libarchive and zlib)",
    "cli/run.c: docker/docker.h": "`airlock run --driver docker` talks to dockerd itself",
    "cli/run.c: image/image.h": "`airlock run --image` resolves the image itself",
    "cli/smoke.c: image/image.h": "`airlock smoke --driver kubernetes` finds the image's export record itself",
    "cli/run.c: lang/lang.h": "`airlock run` picks the language itself",
    "cli/serve.c: box/cgroup.h": "`airlock serve` sets up the cgroup root before the service starts",
    # the core reaches past the drivers for what no driver operation offers yet
    "core/artifacts.c: box/box.h": "artifact staging uses the box's limits (a driver operation to come)",
    "core/artifacts.c: box/collect.h": "artifact staging reads files beneath their tree with the box's collector",
    "core/config.c: image/image.h": "settings name an image; its digest is checked here",
    "core/run_spec.h: proxy/policy.h": "a run spec holds the network policy as the proxy's type",
    "core/runner.c: image/image.h": "a run's image is resolved before its driver is called",
    "core/runs.c: image/image.h": "a run's image is checked when it is requested",
    "core/run_job.c: image/image.h": "a run's image is resolved again when its job is built (removed since: a "
                                     "provisioning failure)",
    "core/service.c: image/image.h": "the service lists the images at start",
    "core/service.h: proxy/policy.h": "the service keeps the default network policy as the proxy's type",
    "core/settings.h: proxy/policy.h": "settings hold the network policy as the proxy's type",
    "core/skills.c: box/collect.h": "a skill bundle is read beneath its tree with the box's collector",
    "core/skill_store.c: box/collect.h": "stored bundles are removed beneath their tree with the box's collector",
    "core/skills.c: image/image.h": "a skill names an image",
    "core/sandbox_ctl.c: image/image.h": "an E2B sandbox's template names an image alias, checked at create",
}

# "file: function" -> why (functions over MAX_FUNCTION_LINES)
FUNCTION_EXCEPTIONS = {
}

# "file" -> why (files over MAX_FILE_LINES)
FILE_EXCEPTIONS = {
}

# a circle: the sorted files of one strongly connected set -> why. The
# circle must be listed exactly as it is: when a file leaves it, list the
# smaller one left.
CIRCLE_EXCEPTIONS = {
}

# ------------------------------------------------------------ rule 1

# A statement's opening words, as a C string literal holds them (the
# sources write SQL in capitals; `#pragma` is not a PRAGMA).
SQL = re.compile(r'"[^"\n]*\b(SELECT\s+[^"\n]*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|'
                 r'CREATE\s+(TABLE|INDEX|TRIGGER)|BEGIN\s+IMMEDIATE|PRAGMA\s+\w+)\b')
STORE_INSIDE = re.compile(r'#include\s+"[^"]*(store/internal\.h|store/backend\.h|sqlite3\.h|libpq-fe\.h)"|'
                          r'#include\s+<(sqlite3|libpq-fe)\.h>')

# The HTTP statuses the API answers with; in src/core none of them may be
# what a function returns, a refusal is built with, or a status is set to
# or compared with (comments and string literals aside).
HTTP = r"(?:200|201|202|204|400|401|402|403|404|405|409|410|413|415|422|429|500|502|503|504|507)"
HTTP_IN_CORE = re.compile(
    r"\breturn\b[^;]*\b" + HTTP + r"\b"
    r"|\b(?:\w*error\w*|\w*fail\w*|\w*refuse\w*|REFUSE|\w*reply\w*|\w*answer\w*)\(\s*(?:[\w>.-]+,\s*)?" + HTTP + r"\b"
    r"|\b(?:st|status|\w+_status|refuse)\s*(?:[=!]=|=)\s*[^;,)]*\b" + HTTP + r"\b")
HTTP_LIB_IN_CORE = re.compile(r"#include\s+<microhttpd\.h>|\bMHD_\w+")

INCLUDE = re.compile(r'\s*#\s*include\s+"(?:\.\./)*([a-z_]+)/([^"]+)"')


def code_only(text):
    """TEXT with its comments and string and character literals blanked
    (newlines kept, so that line numbers and columns stay)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


class Tree:
    """The C files of SRC, read once."""

    def __init__(self, src):
        self.src = Path(src)
        self.text, self.code = {}, {}
        for p in sorted(self.src.rglob("*")):
            if p.suffix in (".c", ".h") and p.is_file():
                rel = p.relative_to(self.src).as_posix()
                self.text[rel] = p.read_text(errors="replace")
                self.code[rel] = code_only(self.text[rel])

    def files(self, layer=None, suffix=(".c", ".h")):
        return [f for f in self.text if (layer is None or f.split("/")[0] == layer) and f.endswith(suffix)]


def check_sql(tree):
    found = []
    for f in tree.files():
        if f.startswith("store/"):
            continue
        for n, line in enumerate(tree.text[f].splitlines(), 1):
            if SQL.search(line) or STORE_INSIDE.search(line):
                found.append(f"{f}:{n}: SQL or the store's insides outside src/store: {line.strip()}")
    return found


def check_http_in_core(tree):
    found = []
    for f in tree.files("core"):
        lines = tree.text[f].splitlines()
        for n, line in enumerate(tree.code[f].splitlines(), 1):
            if HTTP_IN_CORE.search(line) or HTTP_LIB_IN_CORE.search(line):
                found.append(f"{f}:{n}: HTTP in src/core (answer an al_status; src/api maps it): {lines[n - 1].strip()}")
    return found


# ------------------------------------------------------------ rule 2

# Headers of a layer's insides, which no other layer may include even
# where it may include the layer: the service is opaque above src/core.
PRIVATE_HEADERS = {"core/service_int.h": "core", "core/runner.h": "core", "core/sandbox_int.h": "core",
                   "store/internal.h": "store", "store/backend.h": "store", "api/mcp_internal.h": "api",
                   "docker/container_int.h": "docker", "remote/remote_int.h": "remote"}


def check_private(tree):
    found = []
    for f in tree.files():
        for n, line in enumerate(tree.text[f].splitlines(), 1):
            m = INCLUDE.match(line)
            if m and f"{m.group(1)}/{m.group(2)}" in PRIVATE_HEADERS and \
                    f.split("/")[0] != PRIVATE_HEADERS[f"{m.group(1)}/{m.group(2)}"]:
                found.append(f"{f}:{n}: another layer's insides: {line.strip()}")
    return found


def check_includes(tree):
    found, used = [], set()
    for f in tree.files():
        layer = f.split("/")[0]
        if layer not in EDGES:
            found.append(f"{f}: a directory of src/ the layer map does not know (add it to EDGES)")
            continue
        for n, line in enumerate(tree.text[f].splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or m.group(1) in EDGES[layer] | {layer, "util"}:
                continue
            key = f"{f}: {m.group(1)}/{m.group(2)}"
            if key in INCLUDE_EXCEPTIONS:
                used.add(key)
                continue
            below = ", ".join(sorted(EDGES[layer])) or "none"
            found.append(f"{f}:{n}: an include across the layering ({layer} may include {below} and util): "
                         f"{line.strip()}")
    found += [f"INCLUDE_EXCEPTIONS: {k!r} is no longer needed: delete it" for k in INCLUDE_EXCEPTIONS if k not in used]
    return found


# ------------------------------------------------------------ the C reader

TOKEN = re.compile(r"[A-Za-z_]\w*|\d\w*|->|[^\s\w]")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "__attribute__",
            "__typeof__", "typeof", "_Alignof", "_Static_assert", "defined"}


def top_level(code):
    """The top-level statements of CODE (comments and literals blanked):
    [(first line, last line, head, body)]. A function's definition is its
    head (the text up to its `{`) and its body (between that `{` and the
    matching `}`); any other statement runs to its `;` at depth 0, with the
    braces it holds (a struct's members, an initializer) kept as `{}` in
    its head and BODY None. Preprocessor lines (with their continuations)
    are left out."""
    cleaned, cont = [], False
    for line in code.splitlines():
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            cleaned.append("")
        else:
            cleaned.append(line)
    out = []
    head, start, depth, body = [], None, 0, []
    for n, line in enumerate(cleaned, 1):
        for ch in line:
            if depth == 0:
                if start is None and ch in " \t":
                    continue
                if start is None:
                    start = n
                if ch == "{":
                    depth, body = 1, []
                elif ch == ";":
                    out.append((start, n, "".join(head).strip(), None))
                    head, start = [], None
                else:
                    head.append(ch)
            elif ch == "{":
                depth += 1
                body.append(ch)
            elif ch == "}":
                depth -= 1
                if depth:
                    body.append(ch)
                elif function_name("".join(head)):
                    out.append((start, n, "".join(head).strip(), "".join(body)))
                    head, start = [], None
                else:
                    head.append("{}")
            else:
                body.append(ch)
        if depth == 0 and start is not None:
            head.append("\n")
        elif depth:
            body.append("\n")
    return out


def function_name(head):
    """The name a definition's head declares, when it is a function's (its
    text up to the `{` ends with the parameter list's `)`), else None."""
    h = head.strip()
    if not h.endswith(")") or "=" in h.split("(")[0]:
        return None
    toks = TOKEN.findall(h)
    for i, t in enumerate(toks[:-1]):
        if toks[i + 1] == "(" and re.match(r"[A-Za-z_]\w*$", t) and t not in KEYWORDS:
            return t
    return None


def definitions(code):
    """(functions {name: (first, last, static)}, globals {name: static})
    that CODE defines at its top level."""
    funcs, globs = {}, {}
    for first, last, head, body in top_level(code):
        toks = TOKEN.findall(head)
        static = "static" in toks
        if body is not None:
            funcs[function_name(head)] = (first, last, static)
            continue
        if not toks or {"typedef", "extern"} & set(toks):
            continue
        if "=" in toks:
            toks = toks[:toks.index("=")]
        elif "(" in toks:
            continue   # a prototype
        while len(toks) > 1 and toks[-1] == "]":
            toks = toks[:len(toks) - 1 - toks[::-1].index("[")]
        # `struct x {...};` declares a type, `T name` or `struct {...} name` a global
        if len(toks) >= 2 and re.match(r"[A-Za-z_]\w*$", toks[-1]) and toks[-2] not in ("struct", "union", "enum"):
            globs[toks[-1]] = static
    return funcs, globs


# ------------------------------------------------------------ rule 3

def check_lengths(tree):
    found, used_f, used_l = [], set(), set()
    for layer in FUNCTION_LAYERS:
        for f in tree.files(layer, (".c",)):
            for name, (first, last, _) in definitions(tree.code[f])[0].items():
                n = last - first + 1
                if n <= MAX_FUNCTION_LINES:
                    continue
                key = f"{f}: {name}"
                if key in FUNCTION_EXCEPTIONS:
                    used_f.add(key)
                    continue
                found.append(f"{f}:{first}: {name} is {n} lines (at most {MAX_FUNCTION_LINES}: split it)")
    for layer in FILE_LAYERS:
        for f in tree.files(layer):
            n = tree.text[f].count("\n")
            if n <= MAX_FILE_LINES:
                continue
            if f in FILE_EXCEPTIONS:
                used_l.add(f)
                continue
            found.append(f"{f}: {n} lines (at most {MAX_FILE_LINES} in src/{layer}: split it)")
    found += [f"FUNCTION_EXCEPTIONS: {k!r} is no longer needed: delete it" for k in FUNCTION_EXCEPTIONS if k not in used_f]
    found += [f"FILE_EXCEPTIONS: {k!r} is no longer needed: delete it" for k in FILE_EXCEPTIONS if k not in used_l]
    return found


# ------------------------------------------------------------ rule 4

def calls(tree, layer):
    """{file A: {file B: names}}: the .c files of LAYER that name a function
    or global another .c file of LAYER defines and does not keep static."""
    files = tree.files(layer, (".c",))
    owner = {}
    for f in files:
        funcs, globs = definitions(tree.code[f])
        for name, (_, _, static) in funcs.items():
            if not static:
                owner.setdefault(name, set()).add(f)
        for name, static in globs.items():
            if not static:
                owner.setdefault(name, set()).add(f)
    graph = {f: {} for f in files}
    for f in files:
        for name in set(re.findall(r"[A-Za-z_]\w*", tree.code[f])):
            for g in owner.get(name, ()):
                if g != f:
                    graph[f].setdefault(g, set()).add(name)
    return graph


def circles(graph):
    """The strongly connected sets of GRAPH with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(tuple(sorted(scc)))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_circles(tree):
    found, used = [], set()
    for layer in CIRCLE_LAYERS:
        graph = calls(tree, layer)
        for scc in circles(graph):
            if scc in CIRCLE_EXCEPTIONS:
                used.add(scc)
                continue
            ties = []
            for a in scc:
                for b in scc:
                    if b in graph[a]:
                        ties.append(f"    {a} -> {b}: {', '.join(sorted(graph[a][b]))}")
            found.append(f"a circle of files calling each other in src/{layer}: {', '.join(scc)}\n" + "\n".join(ties))
    found += [f"CIRCLE_EXCEPTIONS: {k!r} is no longer a circle as listed: delete it (or list the circle left)"
              for k in CIRCLE_EXCEPTIONS if k not in used]
    return found


# ------------------------------------------------------------ self-test

def self_test():
    """The rules see what they are meant to see (run before every check)."""
    for bad in ("return 409;", "    return x->wait ? 200 : 201;", 'return run_error(ret_doc, 500, "internal", "x");',
                'REFUSE(400, "bad_request", "the body must be a JSON object");', "unsigned st = rows.n ? 409 : 404;",
                "if (st == 400 && strstr(m, \"image\"))", "fail(ret, 403, \"forbidden\", msg);"):
        assert HTTP_IN_CORE.search(code_only(bad)), bad
    for fine in ("al_store_watch_next(s->watch, 500, channel, sizeof channel);", "char msg[500];",
                 "/* answers 404 */ return AL_STATUS_NOT_FOUND;", 'return al_err(err, "x", EIO, "HTTP 500");'):
        assert not HTTP_IN_CORE.search(code_only(fine)), fine
    code = code_only(
        '#include "x.h"\n'
        "static int helper(int a) {\n    return a; /* } */\n}\n"
        "const struct ops al_x_ops = {\n    .run = helper,\n};\n"
        "int al_count;\nstatic int hidden[4];\nint al_proto(void);\ntypedef struct { int a; } al_t;\n"
        "static struct {\n    int n;\n} P = { .n = 1 };\nstruct al_y { int b; };\nchar al_buf[2][8] = { 0 };\n"
        "__attribute__((unused)) json_t *\nal_long(const char *s,\n        int n)\n{\n"
        '    const char *x = "{";\n    if (n) {\n        return NULL;\n    }\n    return NULL;\n}\n')
    funcs, globs = definitions(code)
    assert funcs == {"helper": (2, 4, True), "al_long": (17, 26, False)}, funcs
    assert globs == {"al_x_ops": False, "al_count": False, "hidden": True, "P": True, "al_buf": False}, globs
    g = {"a.c": {"b.c": {"x"}}, "b.c": {"c.c": {"y"}}, "c.c": {"a.c": {"z"}}, "d.c": {"a.c": {"w"}}}
    assert circles(g) == [("a.c", "b.c", "c.c")], circles(g)


def main(argv):
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2] / "src"
    self_test()
    tree = Tree(src)
    assert tree.files("core") and tree.files("api"), f"no sources under {src}"
    found = check_sql(tree) + check_http_in_core(tree) + check_includes(tree) + check_private(tree) + check_lengths(tree) + check_circles(tree)
    for line in found:
        print(line)
    print(f"check_layers: {len(tree.text)} files, {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
