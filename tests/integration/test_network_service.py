"""Network policy through the service: the run's `network` field, the
workspace's allowed modes, the approval card, the run's egress log and the
tool.call audit event, against the network tests' real hosts. The service
runs the test-hooks build (build-asan), the only one that can treat the
test hosts' range as public."""
import pytest

from net_util import ASAN_AIRLOCK, NetHosts
from service_util import (Service, audit_events, get_settings, gov_tenant, hooks_binary, put_settings,
                          shutdown, wait_gov_state)

FETCH = '''
import urllib.request
for u in ("http://allowed.test/svc", "http://other.test/svc"):
    try:
        print(u, urllib.request.urlopen(u, timeout=10).status)
    except Exception as e:
        print(u, "refused:", e)
'''


@pytest.fixture(scope="module")
def hosts():
    h = NetHosts().start()
    yield h
    h.stop()


@pytest.fixture(scope="module")
def svc(hosts, tmp_path_factory):
    env = {k: v for k, v in hosts.env().items() if k.startswith(("AIRLOCK_DNS", "AIRLOCK_TEST", "ASAN", "UBSAN"))}
    s = Service(tmp_path_factory.mktemp("netsvc") / "state", extra_env=env,
                binary=hooks_binary(ASAN_AIRLOCK.parent)).start()
    yield s
    shutdown(s)
    # this service is the ASan+UBSan build with leak detection: its log
    # must hold no report, from any run or from its own shutdown
    log = s.log_path.read_text(errors="replace")
    for report in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert report not in log, log[log.find(report) - 2000:][:6000]


def test_run_with_hosts_policy_records_egress_and_audits_it(svc):
    t = gov_tenant(svc, "net")
    svc.admin("credits", "grant", "--org", t.org, "1000")
    put_settings(t.client, network_hosts=["allowed.test"])   # the hosts a run may name are the workspace's
    run = t.client.run(FETCH, network="hosts:Allowed.Test.")
    assert run["state"] == "succeeded", run
    assert run["network"] == "hosts:allowed.test"                     # stored in canonical form
    out = run["result"]["stdout"]
    assert "http://allowed.test/svc 200" in out and "http://other.test/svc refused: HTTP Error 403" in out, out
    egress = run["result"]["network"]["egress"]
    # a connection is logged when it ends: the order of two is not the order they began
    assert sorted((e["host"], e["decision"]) for e in egress) == [("allowed.test", "allowed"), ("other.test", "denied")]
    assert run["result"]["controls"]["network"]["level"] == "boundary-conditional"
    call = [e for e in audit_events(t.client) if e["kind"] == "tool.call" and e["run_id"] == run["id"]]
    assert call and call[0]["data"]["network"] == "hosts:allowed.test"
    eg = call[0]["data"]["egress"]
    assert eg["connections"] == 2 and eg["denied"] == 1 and eg["bytes"] > 0, eg


def test_workspace_allow_list_of_modes(svc):
    t = gov_tenant(svc, "netmodes")
    svc.admin("credits", "grant", "--org", t.org, "1000")
    doc = get_settings(t.client)
    assert doc["network"] == "offline" and doc["network_allowed"] == ["offline", "packages", "hosts"]
    assert doc["network_modes"]["offline"]["level"] == "boundary"
    assert doc["network_modes"]["internet"]["level"] == "boundary-conditional"
    # internet is not allowed until an admin allows it
    status, _, err = t.client.post_run("print(1)", wait=True, network="internet")
    assert status == 403 and err["error"]["code"] == "network_not_allowed", err
    status, _, err = t.client.post_run("print(1)", wait=True, network="hosts:*.test")
    assert status == 400 and "wildcards" in err["error"]["message"], err
    status, _, err = t.client.post_run("print(1)", wait=True, network=["internet"])
    assert status == 400, err
    _, member = t.person_in("member")
    put_settings(member, want=403, network_allowed=["offline", "internet"])
    put_settings(t.client, want=400, network_allowed=["offline", "wifi"])
    put_settings(t.client, want=400, network_allowed=["internet"])         # the default (offline) must stay allowed
    put_settings(t.client, network_allowed=["offline", "internet"], network="internet")
    run = t.client.run('import os; print(os.environ["AIRLOCK_NETWORK"])')   # the workspace default applies
    assert run["network"] == "internet" and run["result"]["stdout"].strip() == "internet", run
    status, _, err = t.client.post_run("print(1)", wait=True, network="hosts:allowed.test")
    assert status == 403 and err["error"]["code"] == "network_not_allowed"


def test_approval_card_shows_the_network_policy(svc):
    t = gov_tenant(svc, "netappr")
    svc.admin("credits", "grant", "--org", t.org, "1000")
    put_settings(t.client, approval_policy="always", network_hosts=["allowed.test"])
    status, _, run = t.client.post_run(FETCH, network="hosts:allowed.test")
    assert status == 201, run
    run = wait_gov_state(t.client, run["id"], {"pending_approval"})
    card = t.client.ok("GET", f"/v1/runs/{run['id']}")["approval"]
    assert card["network"] == "hosts:allowed.test", card


def test_an_ipv4_spelling_with_a_trailing_dot_is_no_host_name(svc):
    """fuzz-addr found "0xa9fea9fe." (169.254.169.254 with a root label's
    dot) classified as a host name: a workspace could list it in
    network_hosts and a run could name it in hosts:, though a hosts policy
    lists names only. Both now refuse it as an address, like its dotless
    spelling."""
    t = gov_tenant(svc)
    for spelling in ("0xa9fea9fe.", "0x4.", "169.254.169.254.", "127.1."):
        put_settings(t.client, want=400, network_hosts=[spelling])
        status, _, err = t.client.post_run("print(1)", wait=True, network=f"hosts:{spelling}")
        assert status == 400 and "is an IP address" in err["error"]["message"], (spelling, err)
    # a name with its root label's dot is still the name
    put_settings(t.client, network_hosts=["allowed.test."])
    assert get_settings(t.client)["network_hosts"] == ["allowed.test"]
