"""The E2B SDKs (npm e2b 2.51.0, @e2b/code-interpreter 2.8.0), unchanged,
running commands and code cells in airlock sandboxes
(tests/e2e/e2b_commands.test.mjs, e2b_code.test.mjs): each is one airlock
run in the sandbox's working directory; and what the SDKs cannot show: the
Connect framing refusing hostile envelopes, envs the box keeps for itself."""
import struct

from node_util import node_test, npm_ci
from service_util import gov_tenant, put_settings, service  # noqa: F401


def test_e2b_commands_sdk(service):
    npm_ci()
    t = gov_tenant(service, "e2bappr")
    put_settings(t.client, approval_policy="always", allow_self_approval=True, approval_ttl_s=600)
    node_test("e2b_commands.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key,
                                        "AIRLOCK_APPROVAL_KEY": t.key}, expect=4)


# ------------------------------------------------------------ what the SDK cannot show

def create(service, **body):
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", **body},
                                     headers={"X-API-KEY": service.key})
    assert status == 201, (status, doc)
    return doc["sandboxID"], doc["envdAccessToken"]


def start(service, sid, token, body, flags=0, length=None):
    """POST /process.Process/Start with BODY (bytes) in one envelope (its
    flags and length as given): the frames of the answer as (flags, bytes)."""
    env = struct.pack(">BI", flags, len(body) if length is None else length) + body
    status, _, raw = service.request("POST", "/process.Process/Start", key=None, body=env, headers={
        "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
        "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})
    assert status == 200, (status, raw)
    raw = raw if isinstance(raw, bytes) else raw.encode() if isinstance(raw, str) else bytes(raw)
    frames, i = [], 0
    while i < len(raw):
        f, n = struct.unpack(">BI", raw[i:i + 5])
        frames.append((f, raw[i + 5:i + 5 + n]))
        i += 5 + n
    assert i == len(raw), raw
    return frames


def test_hostile_envelopes_end_in_an_error_frame(service):
    sid, token = create(service)
    ok = b'{"process":{"cmd":"/bin/bash","args":["-l","-c","echo x"]}}'
    for body, flags, length, code in [
        (ok, 1, None, b"invalid_argument"),                     # compressed: refused (not offered)
        (ok, 0, len(ok) + 7, b"invalid_argument"),              # a length that lies
        (ok, 0, 0xFFFFFFFF, b"resource_exhausted"),             # 4 GiB claimed
        (b"[1]", 0, None, b"invalid_argument"),                 # no object
        (b'{"process":{"cmd":"/bin/bash","envs":{"AIRLOCK_NETWORK":"x"}}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash","envs":{"1BAD":"x"}}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash","cwd":"/home/user/../../etc"}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash"},"stdin":true}', 0, None, b"unimplemented"),
    ]:
        frames = start(service, sid, token, body, flags, length)
        assert len(frames) == 1 and frames[0][0] == 2 and code in frames[0][1], (body, flags, length, frames)
    # the same request well formed runs: start, data, end, end-stream
    frames = start(service, sid, token, ok)
    assert [f for f, _ in frames] == [0, 0, 0, 2], frames
    assert b'"start"' in frames[0][1] and b'"stdout":"eAo="' in frames[1][1] and b'"exitCode":0' in frames[2][1]
    assert frames[3][1] == b"{}"
