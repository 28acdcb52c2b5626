"""Hostile battery, group O3 (docs/security.md): the audit trail's head is
anchored.  The attacker has write access to the service's database (the
SQLite file, or PostgreSQL credentials) but not the operator's key.  A hash
chain alone shows that nothing before its newest event changed, never that
there was no newer event: deleting events from the end, or rewriting the
newest ones with hashes recomputed (the hashing is public), leaves a chain
whose every link holds.  Each case is differential: it first shows plain
`airlock admin audit verify` calling the doctored chain intact (the attack
works without an anchor), then that a head printed earlier
(`--expect-head`) or a checkpoint the service signed earlier
(`--checkpoint`) shows it, and that a checkpoint signed with any other key
is refused."""
import base64
import hashlib
import json
import os
import re
import stat
import time

import pytest

from service_util import gov_tenant, new_role_person, put_settings, services  # noqa: F401

ORIGIN = "airlock/audit/"
DASH = "\u2014 "
CONFIG = {"audit_checkpoint_s": 1}


def verify(svc, *args):
    """`airlock admin audit verify ARGS` on SVC's store: (exit status, what it printed)."""
    proc = svc.admin_run("audit", "verify", *args, timeout=120)
    return proc.returncode, proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")


def verify_unanchored(svc, *args):
    """The same, with the service's own record of the heads it signed
    (STATE/audit.heads) moved aside: what an attacker who can write the state
    directory as well as the database leaves."""
    heads, aside = svc.state / "audit.heads", svc.state / "audit.heads.aside"
    moved = heads.exists()
    if moved:
        os.rename(heads, aside)
    try:
        return verify(svc, *args)
    finally:
        if moved:
            os.rename(aside, heads)


def head_of(out, ws):
    """The head `audit verify` printed for workspace WS: WS:SEQ:HASH."""
    m = re.search(rf"workspace {re.escape(ws)}: \d+ events, chain intact, head ({re.escape(ws)}:\d+:[0-9a-f]{{64}})",
                  out)
    assert m, f"audit verify printed no head for {ws}: {out}"
    return m.group(1)


def checkpoint(client):
    """GET /v1/audit/checkpoint: the document, after checking its fields."""
    doc = client.ok("GET", "/v1/audit/checkpoint")
    assert {"workspace_id", "seq", "hash", "checkpoint", "verifier_key"} <= set(doc), doc
    return doc


def events(svc, ws):
    """The rows of WS's chain, by seq: (seq, hash)."""
    return svc.sql("SELECT seq, hash FROM audit_events WHERE workspace_id = ? ORDER BY seq", ws)


def populated(services, name):
    """A service (checkpoints every second) with two tenants whose chains have a few events each."""
    svc = services.start(name, CONFIG)
    a, b = gov_tenant(svc, "oa"), gov_tenant(svc, "ob")
    for t in (a, b):
        for i in range(3):
            put_settings(t.client, timeout_s=10 + i)
    a.client.run("print('hello')")
    rc, out = verify(svc)
    assert rc == 0, f"audit verify failed on an untouched store: {out}"
    return svc, a, b


def write_text(path, text):
    path.write_text(text)
    return str(path)


def parse_verifier(vkey):
    """NAME+KEYID+BASE64(0x01 || PUBLIC) -> (name, key id bytes, public key bytes)."""
    name, kid, raw = vkey.split("+", 2)
    raw = base64.b64decode(raw)
    assert len(kid) == 8 and raw[0] == 1 and len(raw) == 33, vkey
    return name, bytes.fromhex(kid), raw[1:]


def key_id(name, pub):
    return hashlib.sha256(name.encode() + b"\n" + b"\x01" + pub).digest()[:4]


def sign_note(body, name, kid, private_key):
    """A signed note (c2sp.org/signed-note) of BODY, as a forger with PRIVATE_KEY would write it."""
    sig = private_key.sign(body.encode())
    return body + "\n" + DASH + name + " " + base64.b64encode(kid + sig).decode() + "\n"


# ------------------------------------------------------------------ cases


def test_o3_cut_back_chain_fails_against_a_printed_head_and_a_checkpoint(services, tmp_path):
    svc, a, b = populated(services, "o3cut")
    rc, out = verify(svc)
    head_a, head_b = head_of(out, a.workspace), head_of(out, b.workspace)
    cp = checkpoint(a.client)
    assert f"{cp['workspace_id']}:{cp['seq']}:{cp['hash']}" == head_a, (cp, head_a)
    cp_file = write_text(tmp_path / "a.checkpoint", cp["checkpoint"])
    svc.stop()
    rows = events(svc, a.workspace)
    assert len(rows) >= 4, rows
    newest = rows[-1][0]
    # the attack: the newest two events of a's chain deleted behind the service's back
    assert svc.sql_count("DELETE FROM audit_events WHERE workspace_id = ? AND seq > ?", a.workspace, newest - 2) == 2

    # the ingredient: with nothing anchored, the shorter chain verifies
    rc, out = verify_unanchored(svc)
    assert rc == 0 and "BROKEN" not in out, f"the plain verify should find no broken link in a cut chain: {out}"
    assert head_of(out, a.workspace) != head_a
    # the plain verify on the state directory reads the heads the service
    # last signed (audit.heads): the cut shows with no checkpoint at hand
    rc, out = verify(svc)
    assert rc == 1 and "heads the service last signed" in out, out
    assert re.search(rf"{a.workspace}: BROKEN at event seq \d+.*truncated", out), out

    rc, out = verify(svc, "--expect-head", head_a, "--expect-head", head_b)
    assert rc == 1, f"audit verify passed a chain cut back before a head printed earlier: {out}"
    assert re.search(rf"{a.workspace}: BROKEN at event seq {newest}\b.*truncated", out), out
    assert head_of(out, b.workspace) == head_b, f"the untouched chain must still verify: {out}"

    rc, out = verify(svc, "--checkpoint", cp_file)
    assert rc == 1, f"audit verify passed a chain cut back before a signed checkpoint: {out}"
    assert f"checkpoint {cp_file}: signed by airlock-audit, head {head_a}" in out, out
    assert "truncated" in out, out


def test_o3_rewritten_newest_event_fails_against_a_checkpoint(services, tmp_path):
    """The newest event's data changed and its hash recomputed (the hashing is
    public): every link holds, but the head is not the one signed."""
    svc, a, _ = populated(services, "o3rewrite")
    cp = checkpoint(a.client)
    cp_file = write_text(tmp_path / "a.checkpoint", cp["checkpoint"])
    svc.stop()
    cols = "workspace_id, seq, org_id, kind, person_id, run_id, data, created_at, prev_hash"
    [row] = svc.sql(f"SELECT {cols} FROM audit_events WHERE workspace_id = ? AND seq = ?", a.workspace, cp["seq"])
    ev = dict(zip([c.strip() for c in cols.split(",")], row))
    assert ev["kind"] == "tool.call", ev
    # the stored text itself, changed in place: the hash covers it as it is
    assert '"exit_code":0' in ev["data"], ev
    ev["data"] = ev["data"].replace('"exit_code":0', '"exit_code":7')
    canon = json.dumps(ev, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    forged = hashlib.sha256((ev["prev_hash"] + "\n" + canon).encode()).hexdigest()
    assert svc.sql_count("UPDATE audit_events SET data = ?, hash = ? WHERE workspace_id = ? AND seq = ?",
                         ev["data"], forged, a.workspace, cp["seq"]) == 1

    rc, out = verify_unanchored(svc)
    assert rc == 0, f"the forged event's hash should be what the plain verify recomputes: {out}"
    assert head_of(out, a.workspace) == f"{a.workspace}:{cp['seq']}:{forged}"
    rc, out = verify(svc)
    assert rc == 1 and re.search(rf"{a.workspace}: BROKEN at event seq {cp['seq']}\b.*rewritten", out), out

    rc, out = verify(svc, "--checkpoint", cp_file)
    assert rc == 1, f"audit verify passed a rewritten head against a signed checkpoint: {out}"
    assert re.search(rf"{a.workspace}: BROKEN at event seq {cp['seq']}\b.*rewritten", out), out


def test_o3_a_deleted_chain_fails_against_its_head(services, tmp_path):
    svc, a, b = populated(services, "o3gone")
    rc, out = verify(svc)
    head_a = head_of(out, a.workspace)
    svc.stop()
    assert svc.sql_count("DELETE FROM audit_events WHERE workspace_id = ?", a.workspace) > 0
    rc, out = verify_unanchored(svc)
    assert rc == 0 and a.workspace not in out, f"a workspace with no events is not in the plain verify: {out}"
    rc, out = verify(svc)
    assert rc == 1 and re.search(rf"{a.workspace}: BROKEN.*every event was removed", out), out
    rc, out = verify(svc, "--expect-head", head_a)
    assert rc == 1 and re.search(rf"{a.workspace}: BROKEN.*every event was removed", out), out


def test_o3_a_forged_or_altered_checkpoint_is_refused(services, tmp_path):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    svc, a, _ = populated(services, "o3forge")
    cp = checkpoint(a.client)
    vkey = svc.admin("audit", "key").strip()
    assert vkey == cp["verifier_key"], (vkey, cp)
    name, kid, _ = parse_verifier(vkey)
    svc.stop()
    rows = events(svc, a.workspace)
    assert svc.sql_count("DELETE FROM audit_events WHERE workspace_id = ? AND seq > ?", a.workspace, rows[-3][0]) == 2
    short_seq, short_hash = rows[-3]
    # what the attacker wants believed: a checkpoint of the cut chain, under the
    # operator key's name and id, signed with a key of their own
    body = f"{ORIGIN}{a.workspace}\n{short_seq}\n{base64.b64encode(bytes.fromhex(short_hash)).decode()}\n"
    forger = Ed25519PrivateKey.generate()
    forged = write_text(tmp_path / "forged", sign_note(body, name, kid, forger))
    from cryptography.hazmat.primitives import serialization
    forger_pub = forger.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    forger_raw = base64.b64encode(bytes([1]) + forger_pub).decode()
    forger_vkey = f"{name}+{key_id(name, forger_pub).hex()}+{forger_raw}"

    own = write_text(tmp_path / "own", sign_note(body, name, key_id(name, forger_pub), forger))

    # the ingredient: the forgery is a well-formed checkpoint, accepted under
    # the forger's own key (by a verify that does not hold the service's own
    # record of the heads it signed, which the cut fails on)
    rc, out = verify_unanchored(svc, "--checkpoint", own, "--verifier", forger_vkey)
    assert rc == 0, f"the forged checkpoint should verify under the forger's key: {out}"

    for args in (("--checkpoint", forged), ("--checkpoint", forged, "--verifier", vkey), ("--checkpoint", own)):
        rc, out = verify(svc, *args)
        assert rc not in (0, 1) and "no valid signature" in out, f"a forged checkpoint was accepted: {out}"

    # a genuine checkpoint with its size or hash changed
    lines = cp["checkpoint"].split("\n")
    for i, value in ((1, str(short_seq)), (2, base64.b64encode(bytes.fromhex(short_hash)).decode())):
        altered = lines[:i] + [value] + lines[i + 1:]
        path = write_text(tmp_path / f"altered{i}", "\n".join(altered))
        rc, out = verify(svc, "--checkpoint", path)
        assert rc not in (0, 1) and "no valid signature" in out, f"an altered checkpoint was accepted: {out}"
    # and the genuine one shows the cut
    rc, out = verify(svc, "--checkpoint", write_text(tmp_path / "genuine", cp["checkpoint"]))
    assert rc == 1 and "truncated" in out, out


def test_o3_checkpoints_are_signed_notes_logged_on_change(services, tmp_path):
    """The endpoint's and the log's checkpoints are c2sp signed notes that an
    independent ed25519 implementation verifies; the key is the operator's
    alone (0600); only a workspace admin takes a checkpoint, of their own
    workspace."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    svc, a, b = populated(services, "o3format")
    key_file = svc.state / "audit.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600, oct(os.stat(key_file).st_mode)
    vkey = svc.admin("audit", "key").strip()
    name, kid, pub = parse_verifier(vkey)
    assert key_id(name, pub) == kid
    assert key_file.read_text().startswith("PRIVATE+KEY+" + name + "+" + kid.hex() + "+")

    def check_note(text, ws, seq, hash_hex):
        body, sigs = text.rsplit("\n\n", 1)
        assert body.split("\n") == [ORIGIN + ws, str(seq), base64.b64encode(bytes.fromhex(hash_hex)).decode()], body
        [line] = sigs.rstrip("\n").split("\n")
        assert line.startswith(DASH + name + " "), line
        raw = base64.b64decode(line.split(" ")[-1])
        assert raw[:4] == kid
        Ed25519PublicKey.from_public_bytes(pub).verify(raw[4:], (body + "\n").encode())

    cp = checkpoint(a.client)
    assert cp["workspace_id"] == a.workspace
    check_note(cp["checkpoint"], a.workspace, cp["seq"], cp["hash"])
    assert checkpoint(b.client)["workspace_id"] == b.workspace

    _, member = new_role_person(svc, a.workspace, "o3member", "member")
    status, _, doc = member.request("GET", "/v1/audit/checkpoint")
    assert status == 403, (status, doc)
    status, _, doc = a.client.request("POST", "/v1/audit/checkpoint", json={})
    assert status == 405, (status, doc)

    # a head that moves is logged, signed, within a few checkpoint intervals
    put_settings(a.client, timeout_s=42)
    [(seq, hsh)] = svc.sql("SELECT seq, hash FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1",
                           a.workspace)
    deadline, logged = time.monotonic() + 15, None
    while time.monotonic() < deadline and not logged:
        for line in svc.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"audit.checkpoint"' in line:
                d = json.loads(line)
                if d.get("workspace_id") == a.workspace and d.get("seq") == seq:
                    logged = d
        time.sleep(0.3)
    assert logged, f"no audit.checkpoint of {a.workspace}:{seq} in the log\n{svc.log_tail()}"
    assert logged["hash"] == hsh
    check_note(logged["checkpoint"], a.workspace, seq, hsh)

    # a key open to others is refused
    os.chmod(key_file, 0o644)
    proc = svc.admin_run("audit", "key")
    assert proc.returncode != 0 and b"chmod 600" in proc.stderr, proc
    os.chmod(key_file, 0o600)


def test_o3_the_service_does_not_sign_a_chain_cut_behind_its_back(services):
    """A live service that signed a head refuses to sign the chain once it no
    longer holds that head (409, audit.head_rewritten in its log): a
    checkpoint taken after the cut cannot launder it."""
    svc, a, b = populated(services, "o3live")
    cp = checkpoint(a.client)
    assert svc.sql_count("DELETE FROM audit_events WHERE workspace_id = ? AND seq >= ?", a.workspace, cp["seq"]) == 1
    # the ingredient: the cut chain has a head the service could sign
    assert svc.sql("SELECT COUNT(*) FROM audit_events WHERE workspace_id = ?", a.workspace)[0][0] >= 1
    status, _, doc = a.client.request("GET", "/v1/audit/checkpoint")
    assert status == 409 and "cut back or rewritten" in json.dumps(doc), (status, doc)
    assert checkpoint(b.client)["workspace_id"] == b.workspace, "the other chain is still signed"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and '"audit.head_rewritten"' not in svc.log_path.read_text(errors="replace"):
        time.sleep(0.2)
    assert '"audit.head_rewritten"' in svc.log_path.read_text(errors="replace"), svc.log_tail()


def test_o3_a_chain_cut_while_the_service_was_stopped_is_seen_at_its_start(services):
    """The last head signed of each chain is kept in the state directory
    (audit.heads), outside the store: an attacker with the database alone
    (PostgreSQL credentials, say) who cuts a chain while the service is
    stopped does not get the cut chain signed at the next start."""
    svc, a, b = populated(services, "o3restart")
    cp = checkpoint(a.client)
    svc.stop()
    heads = (svc.state / "audit.heads").read_text()
    assert f"{a.workspace}:{cp['seq']}:{cp['hash']}" in heads, heads
    assert stat.S_IMODE(os.stat(svc.state / "audit.heads").st_mode) == 0o600
    assert svc.sql_count("DELETE FROM audit_events WHERE workspace_id = ? AND seq >= ?", a.workspace, cp["seq"]) == 1

    # the ingredient: a service that remembers nothing signs the cut chain
    saved = svc.state / "audit.heads.saved"
    os.rename(svc.state / "audit.heads", saved)
    svc.start()
    doc = checkpoint(a.client)
    assert doc["seq"] == cp["seq"] - 1, (doc, cp)
    svc.stop()

    os.replace(saved, svc.state / "audit.heads")
    svc.start()
    status, _, doc = a.client.request("GET", "/v1/audit/checkpoint")
    assert status == 409 and "cut back or rewritten" in json.dumps(doc), (status, doc)
    assert checkpoint(b.client)["workspace_id"] == b.workspace, "the other chain is still signed"
    log = svc.log_path.read_text(errors="replace")
    assert '"audit.head_rewritten"' in log[log.rfind("===== start"):], svc.log_tail()


def test_o3_the_key_can_live_outside_the_state_directory(services, tmp_path):
    """`audit_key = PATH`: the key is made there (0600), not in the state
    directory, and checkpoints are checked with `--key PATH` or the public
    half alone (`--verifier`)."""
    keydir = tmp_path / "keys"
    keydir.mkdir(mode=0o700)
    key = keydir / "airlock-audit.key"
    svc = services.start("o3keypath", dict(CONFIG, audit_key=str(key)))
    a = gov_tenant(svc, "ok")
    put_settings(a.client, timeout_s=11)
    assert key.exists() and stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert not (svc.state / "audit.key").exists()
    cp = checkpoint(a.client)
    vkey = svc.admin("audit", "key", "--key", str(key)).strip()
    assert vkey == cp["verifier_key"]
    f = write_text(tmp_path / "cp", cp["checkpoint"])
    rc, out = verify(svc, "--checkpoint", f, "--key", str(key))
    assert rc == 0 and f"head {cp['workspace_id']}:{cp['seq']}:{cp['hash']}" in out, out
    rc, out = verify(svc, "--checkpoint", f, "--verifier", vkey)
    assert rc == 0, out
    # the state directory has no key: nothing to check with unless one is named
    rc, out = verify(svc, "--checkpoint", f)
    assert rc == 125 and "audit.key" in out, out
