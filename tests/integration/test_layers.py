"""The layering the build promises (docs/architecture.md), checked on the
sources: SQL lives in src/store alone, each layer includes only what is
below it, and the core knows nothing of HTTP (no libmicrohttpd, no status
codes: it answers in al_status, which src/api maps)."""
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# A statement's opening words, as a C string literal holds them (the
# sources write SQL in capitals; `#pragma` is not a PRAGMA).
SQL = re.compile(r'"[^"\n]*\b(SELECT\s+[^"\n]*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|'
                 r'CREATE\s+(TABLE|INDEX|TRIGGER)|BEGIN\s+IMMEDIATE|PRAGMA\s+\w+)\b')
STORE_INSIDE = re.compile(r'#include\s+"[^"]*(store/internal\.h|store/backend\.h|sqlite3\.h|libpq-fe\.h)"|'
                          r'#include\s+<(sqlite3|libpq-fe)\.h>')

# layer -> the directories of src/ it may include from (besides its own and util)
MAY_INCLUDE = {
    "util": set(),
    "lang": set(),
    "box": {"lang", "image"},
    "image": {"box", "lang"},
    "proxy": set(),
    "store": set(),
    "docker": {"box", "lang", "image"},
    "drivers": {"box", "docker", "lang", "image", "proxy"},
    "core": {"store", "box", "proxy", "drivers", "image", "lang"},
    "api": {"core", "store", "box", "proxy", "drivers", "image", "lang"},
    "cli": {"api", "core", "store", "box", "docker", "proxy", "drivers", "image", "lang"},
}

# The HTTP statuses the API answers with; in src/core none of them may be
# what a function returns, a refusal is built with, or a status is set to
# or compared with (comments and string literals aside).
HTTP = r"(?:200|201|202|204|400|401|402|403|404|405|409|410|413|415|422|429|500|502|503|504|507)"
HTTP_IN_CORE = re.compile(
    r"\breturn\b[^;]*\b" + HTTP + r"\b"
    r"|\b(?:\w*error\w*|\w*fail\w*|\w*refuse\w*|REFUSE|\w*reply\w*|\w*answer\w*)\(\s*(?:[\w>.-]+,\s*)?" + HTTP + r"\b"
    r"|\b(?:st|status|\w+_status|refuse)\s*(?:[=!]=|=)\s*[^;,)]*\b" + HTTP + r"\b")
HTTP_LIB_IN_CORE = re.compile(r"#include\s+<microhttpd\.h>|\bMHD_\w+")


def c_files(under):
    return sorted(p for p in (SRC / under).rglob("*") if p.suffix in (".c", ".h"))


def test_no_sql_outside_src_store():
    found = []
    for p in c_files("."):
        if p.is_relative_to(SRC / "store"):
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if SQL.search(line) or STORE_INSIDE.search(line):
                found.append(f"{p.relative_to(SRC)}:{n}: {line.strip()}")
    assert not found, "SQL, or the store's insides, outside src/store:\n" + "\n".join(found)


def test_each_layer_includes_only_the_layers_below():
    found = []
    for layer, allowed in MAY_INCLUDE.items():
        for p in c_files(layer):
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                m = re.match(r'\s*#include\s+"(\.\./)?([a-z_]+)/', line)
                if m and m.group(2) not in allowed | {"util", layer}:
                    found.append(f"{p.relative_to(SRC)}:{n}: {line.strip()}")
    assert not found, "an include across the layering:\n" + "\n".join(found)


def code_only(text):
    """TEXT with its comments and string and character literals blanked
    (newlines kept, so that line numbers stay)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


def test_core_answers_in_al_status_not_http():
    found = []
    for p in c_files("core"):
        text = p.read_text(errors="replace")
        for n, line in enumerate(code_only(text).splitlines(), 1):
            if HTTP_IN_CORE.search(line) or HTTP_LIB_IN_CORE.search(line):
                found.append(f"{p.relative_to(SRC)}:{n}: {text.splitlines()[n - 1].strip()}")
    assert not found, "HTTP in src/core (answer an al_status; src/api maps it):\n" + "\n".join(found)


def test_the_check_sees_a_status_code():
    """The rule above catches the shapes the core once had."""
    for bad in ("return 409;", "    return x->wait ? 200 : 201;", 'return run_error(ret_doc, 500, "internal", "x");',
                'REFUSE(400, "bad_request", "the body must be a JSON object");', "unsigned st = rows.n ? 409 : 404;",
                "if (st == 400 && strstr(m, \"image\"))", "fail(ret, 403, \"forbidden\", msg);"):
        assert HTTP_IN_CORE.search(code_only(bad)), bad
    for fine in ("al_store_watch_next(s->watch, 500, channel, sizeof channel);", "char msg[500];",
                 "/* answers 404 */ return AL_STATUS_NOT_FOUND;", 'return al_err(err, "x", EIO, "HTTP 500");'):
        assert not HTTP_IN_CORE.search(code_only(fine)), fine
