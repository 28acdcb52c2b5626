"""What coverage-guided fuzzing found (issue 16, docs/fuzzing.md), through
the real service where a client can reach it. Each case ran against the
binary of before the fix (AIRLOCK_BIN=/work/base-bin/airlock) and failed
there; the fuzz targets' reproducers are in tests/fuzz/regress.

Elsewhere: a NUL byte in output through the API is
test_battery_n_tenant.py::test_output_bytes_nul_and_invalid_utf8_are_carried_exactly,
and through the CLI test_cli.py (printf 'a\\x00b...'); an IPv4 spelling with a
trailing dot in a hosts policy is test_network_service.py and test_network.py.
"""
import http.client
import json

import pytest

from service_util import service  # noqa: F401
from test_mcp import Mcp


def raw_mcp(svc, body, headers=None):
    """POST BODY (bytes) to /mcp with HEADERS (name -> bytes), as a client
    that never went through a JSON encoder might: (status, bytes)."""
    conn = http.client.HTTPConnection(svc.host, svc.port, timeout=60)
    try:
        conn.putrequest("POST", "/mcp")
        h = {"Content-Type": b"application/json", "Accept": b"application/json, text/event-stream",
             "Authorization": f"Bearer {svc.key}".encode(), "Content-Length": str(len(body)).encode()}
        h.update(headers or {})
        for k, v in h.items():
            conn.putheader(k, v)
        conn.endheaders()
        conn.send(body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def jsonrpc_error(data):
    doc = json.loads(data)
    assert doc["jsonrpc"] == "2.0" and isinstance(doc["error"]["code"], int) and doc["error"]["message"], doc
    return doc


def test_a_body_cut_inside_an_escape_and_a_character_gets_a_jsonrpc_error(service):
    """The parser's error text quoted the bad token cut inside "é": the
    reply was an empty 400, not JSON-RPC."""
    status, data = raw_mcp(service, b'{"jsonrpc":"2.0","id":1,"method":"\\u\xc3\xa9')
    assert status == 400 and data, (status, data)
    assert jsonrpc_error(data)["error"]["code"] == -32700


@pytest.mark.parametrize("what", ["method", "tool", "uri"])
@pytest.mark.parametrize("prefix", ["", "x", "xy"])
def test_over_long_names_get_an_answer_not_a_dropped_connection(service, what, prefix):
    """An over-long method or tool name, or URI, of characters of more than
    one byte: the error text quoting it was cut inside a character, building
    the error failed, and the server dropped the connection without a reply.
    (Three prefixes, so that a cut at any byte lands inside a character.)"""
    m = Mcp(service)
    long = prefix + "\u00e9\u20ac" * 300
    msg = {"jsonrpc": "2.0", "id": 9, "method": long}
    if what == "tool":
        msg = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": long, "arguments": {}}}
    elif what == "uri":
        msg = {"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": "airlock://" + long}}
    status, _, doc = m.post(msg)
    assert status in (200, 400, 404), (status, doc)
    text = json.dumps(doc)
    assert "error" in text or (isinstance(doc, dict) and doc.get("result", {}).get("isError")), doc


def test_a_header_that_is_not_utf8_gets_an_answer(service):
    """A session id or protocol version header of raw bytes: answered with
    a JSON-RPC error, not a dropped connection."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    for name in ("Mcp-Session-Id", "MCP-Protocol-Version"):
        status, data = raw_mcp(service, body, {name: b"\xff\xfe\xc3"})
        assert 400 <= status < 500 and data, (name, status, data)
        jsonrpc_error(data)


# ------------------------------------------ the run's body (fuzz-run-body)
# (the run spec, src/core/run_spec.c, also refuses a NUL inside a file name
# or its base64, which it used to cut at: not reachable through the service,
# whose JSON reader refuses \u0000 in any body before, so only the fuzz
# target's regress inputs and tests/unit/test_run_spec.c cover it)

def test_piston_timeout_under_a_millisecond_rounds_up(service):
    """Piston's run_timeout is in milliseconds: 0.5 became 0 s and was
    refused, though any positive timeout rounds up. It was rounded up to a
    second; the box's clock now takes milliseconds, so 0.5 is 1 ms: taken,
    and the run is out of time before Python has started."""
    from test_piston import call
    status, doc = call(service, "execute", {"language": "python", "version": "*",
                                            "files": [{"content": "print('ran')"}], "run_timeout": 0.5})
    assert status == 200 and doc["run"]["status"] == "TO" and doc["run"]["stdout"] == "", (status, doc)


def test_piston_huge_limits_are_refused_not_wrapped(service):
    """run_timeout and run_memory_limit of 1e300 were converted to integers
    out of range (undefined behaviour, which UBSan reports in fuzz-piston-body;
    the release binary of before happened to refuse them too, so this is a
    guard, not a differential case); now they are capped, then refused."""
    from test_piston import call
    for field in ("run_timeout", "run_memory_limit"):
        status, doc = call(service, "execute", {"language": "python", "version": "*",
                                                "files": [{"content": "print(1)"}], field: 1e300})
        # (run_timeout's refusal is in milliseconds, as it was asked)
        assert status == 400 and ("limits." in json.dumps(doc) or "the timeout" in doc["message"]), (field, status, doc)


def test_a_malformed_body_is_a_400_whatever_the_workspace_allows(service):
    """The body's own checks (run_body.c, run_spec.c) all come before the ones
    that need the workspace: a body with a bad field is a 400 even when its
    network is one the workspace refuses (before the split it was 403
    network_not_allowed when the network came first)."""
    status, _, doc = service.post_run("print(1)", wait=True, network="internet", description=5)
    assert status == 400 and "description" in doc["error"]["message"], (status, doc)
    status, _, doc = service.post_run("print(1)", wait=True, network="internet")
    assert status == 403 and doc["error"]["code"] == "network_not_allowed", (status, doc)
