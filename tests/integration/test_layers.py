"""The layering the build promises (docs/architecture.md), checked on the
sources: SQL lives in src/store alone, and each layer includes only what is
below it."""
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
    "drivers": {"box", "lang", "image", "proxy"},
}


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
