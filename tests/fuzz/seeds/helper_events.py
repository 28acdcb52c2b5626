#!/usr/bin/env python3
"""Seeds for the helper-events fuzz target (tests/fuzz/fuzz_helper_events.c):
the run helper's event lines (src/drivers/helper_main.c), as sessions, single odd
lines, and raw output bytes, written to tests/fuzz/corpus/helper-events/.

    python3 tests/fuzz/seeds/helper_events.py
"""
import base64
import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "helper-events"


def ev(**kw):
    """One line as the helper's emit() writes it (json_dumps JSON_COMPACT)."""
    return json.dumps(kw, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def b64(b):
    return base64.b64encode(b).decode()


RESULT = {"status": "ok", "exit_code": 0, "stdout": "hi\n", "stderr": "", "files": [{"name": "out/a b.txt", "size": 3}],
          "network": {"policy": "offline", "mode": "none", "egress": [], "egress_dropped": 0}}


def seeds():
    s = {}
    s["session-ok.jsonl"] = (ev(type="started") + ev(type="stdout", data_base64=b64(b"hello\n")) +
                             ev(type="stderr", data_base64=b64(b"warn: \xff\xfe\n")) + ev(type="result", result=RESULT))
    s["session-install.jsonl"] = (ev(type="installing", stream="stdout", data="Collecting tinypkg==1.0\n") +
                                  ev(type="installing", stream="stderr", data_base64=b64(b"npm warn \xff\n")) +
                                  ev(type="installing", data="no stream") + ev(type="installing", stream="other") +
                                  ev(type="installed", layer="sha256:" + "ab" * 32, reused=False, ms=812,
                                     python=[{"name": "tinypkg", "version": "1.0", "sha256": "cd" * 32}], node=[]) +
                                  ev(type="started") + ev(type="result", result=dict(RESULT, packages={
                                      "layer": "sha256:" + "ab" * 32, "reused": False, "install_ms": 812})))
    s["session-error.jsonl"] = ev(type="error", error={"step": "job", "message": "the job needs language, code and out_dir"})
    s["stdout-text.jsonl"] = ev(type="stdout", data="plain text \u00e9\u2028 ok\n")
    s["stdout-text-and-base64.jsonl"] = ev(type="stdout", data="\ufffd\ufffd", data_base64=b64(b"\x00\xff"))
    s["stdout-bad-base64.jsonl"] = ev(type="stdout", data="fallback", data_base64="!!not base64!!")
    s["stdout-no-data.jsonl"] = ev(type="stdout") + ev(type="stderr", data=5)
    s["stdout-escaped-nul.jsonl"] = b'{"type":"stdout","data":"a\\u0000b"}\n'
    s["result-nul-names.jsonl"] = b'{"type":"result","result":{"files":[{"name":"a\\u0000b"}],"stdout":"x\\u0000"}}\n'
    s["result-missing.jsonl"] = ev(type="result", result=RESULT) + ev(type="result")
    s["error-not-object.jsonl"] = ev(type="error", error="just a string")
    s["nul-in-line.jsonl"] = ev(type="started")[:-1] + b"\0garbage\n" + b'{"type":"stdout",\0"data":"x"}\n'
    s["unknown-types.jsonl"] = (ev(type="unknown") + ev(type=1) + ev(type=None) + ev(kind="stdout") +
                                ev(type="stdout\u0000x", data="y") + ev(type="STARTED"))
    s["not-json.jsonl"] = b"not json\n[1,2,3]\n\"stdout\"\n{\"type\":\"stdout\",\"data\":\"unterminated\n\n{}"
    s["deep.jsonl"] = b'{"type":"result","result":' + b"[" * 300 + b"]" * 300 + b"}\n"
    s["duplicate-keys.jsonl"] = b'{"type":"stdout","type":"stderr","data":"a","data":"b"}\n'
    s["bytes-binary.bin"] = bytes(range(256))
    s["bytes-utf8-edges.bin"] = "\u0000\u007f\u0080\u07ff\u0800\uffff\U00010000\U0010ffff".encode("utf-8", "surrogatepass") + \
        b"\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80\xe2\x82"
    s["bytes-newlines.bin"] = b"line1\nline2\r\n\n" + "\u2028".encode()
    return s


def main():
    CORPUS.mkdir(parents=True, exist_ok=True)
    for n, data in seeds().items():
        (CORPUS / n).write_bytes(data)
    print(f"{len(seeds())} files in {CORPUS}")


if __name__ == "__main__":
    main()
