#!/usr/bin/env python3
"""Seeds for the connect fuzz target (tests/fuzz/fuzz_connect.c): request
envelopes of E2B's streaming calls as the SDK sends them, and the ways a
hostile client bends them, written to tests/fuzz/corpus/connect/.

    python3 tests/fuzz/seeds/connect.py
"""
import struct
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "connect"
START = (b'{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"b"},'
         b'"cwd":"/home/user"},"stdin":false}')


def env(body, flags=0, length=None):
    return struct.pack(">BI", flags, len(body) if length is None else length) + body


SEEDS = {
    "start": env(START),
    "connect-pid": env(b'{"process":{"pid":"1234"}}'),
    "compressed": env(b"{}", flags=1),
    "end-stream-flag": env(b"{}", flags=2),
    "length-4gib": env(b"{}", length=0xFFFFFFFF),
    "length-short": env(b"{}", length=1),
    "array": env(b"[1,2]"),
    "two-envelopes": env(b"{}") + env(b"{}"),
    "header-cut": b"\0\0\0",
    "escapes": env('{"a":"\u00e9\\u0001\\ud83d\\ude00"}'.encode()),
    "duplicate-key": env(b'{"a":1,"a":2}'),
}

if __name__ == "__main__":
    CORPUS.mkdir(parents=True, exist_ok=True)
    for name, data in SEEDS.items():
        (CORPUS / f"seed-{name}").write_bytes(data)
