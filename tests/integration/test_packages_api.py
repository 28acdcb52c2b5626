"""Packages in the service (issue 38; docs/api.md, Packages): the `packages`
field on every surface, the workspace's and the service's settings, the
refusals (installs off, the packages network not allowed, another driver,
no installer image, bad specs), a thread's package set, the approval card,
credits and audit, through the real daemon; MCP and E2B through their
official clients (tests/e2e/packages.test.mjs).

The install itself (the installer image, the helper's install step, the
proxy's package_registries) is tested by test_packages.py through `airlock
run`; the tests here that need the installer image say so through need(),
naming it (a failure under AIRLOCK_MUST_WORK=1)."""
import json
import subprocess
import uuid

import pytest

from conftest import ROOT, need
from node_util import node_test, npm_ci
from service_util import (Service, assert_error, audit_events, balance, free_port, gov_tenant,  # noqa: F401
                          service,
                          service_binary)

SPECS = {"python": ["requests==2.31.0"], "node": ["lodash@4.17.21"]}
NAMES = "requests==2.31.0, lodash@4.17.21"
TELL = (f"tell the user that the packages ({NAMES}) could not be installed, and do not substitute something "
        "else")


def tid():
    return "pk-" + uuid.uuid4().hex[:12]


def installer_images():
    """The images directory holding the installer image (P's image/installer),
    built and cached as the other images are; need() when it is not there."""
    need((ROOT / "image" / "installer").is_dir(),
         "the installer image's recipe (image/installer)")
    import image_util
    image_util.ensure_image("installer")
    image_util.ensure_default_image()
    return image_util.CACHE / "images"


@pytest.fixture(scope="module")
def on(tmp_path_factory):
    """A service whose workspaces install packages by default, with no images
    (no installer): the refusals that come before the install."""
    svc = Service(tmp_path_factory.mktemp("pkg-on"), config={"package_installs": "thread"})
    svc.start()
    yield svc
    svc.stop()


def test_settings(service):
    doc = service.ok("GET", "/v1/settings")
    assert doc["package_installs"] == "off" and doc["package_install_scripts"] == "box", doc
    t = gov_tenant(service, "pkset")
    for body, words in (({"package_installs": "on"}, "package_installs must be off or thread"),
                        ({"package_install_scripts": "yes"}, "package_install_scripts must be refuse or box")):
        status, _, err = t.client.request("PUT", "/v1/settings", json=body)
        assert_error(status, err, "bad_request", 400)
        assert words in err["error"]["message"], err
    doc = t.client.ok("PUT", "/v1/settings", json={"package_installs": "thread", "package_install_scripts": "refuse"})
    assert doc["package_installs"] == "thread" and doc["package_install_scripts"] == "refuse", doc
    assert t.client.ok("GET", "/v1/settings")["package_installs"] == "thread"


def test_service_refusing_scripts_is_a_ceiling(tmp_path):
    svc = Service(tmp_path / "s", config={"package_install_scripts": "refuse", "package_installs": "thread"})
    svc.start()
    try:
        doc = svc.ok("GET", "/v1/settings")
        assert doc["package_installs"] == "thread" and doc["package_install_scripts"] == "refuse", doc
        status, _, err = svc.request("PUT", "/v1/settings", json={"package_install_scripts": "box"})
        assert status == 403 and "refuses install scripts" in err["error"]["message"], (status, err)
    finally:
        svc.stop()


def test_bad_config_is_refused(tmp_path):
    for key, value in (("package_installs", "yes"), ("package_index_python", "ftp://x/simple"),
                       ("package_registry_node", "https://a b/"), ("package_install_timeout_s", "0")):
        cfg = tmp_path / f"{key}.conf"
        cfg.write_text(f"{key} = {value}\n")
        p = subprocess.run([str(service_binary()), "serve", "--listen", f"127.0.0.1:{free_port()}", "--state",
                            str(tmp_path / key), "--config", str(cfg)], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0 and key in p.stderr and "want" in p.stderr, (key, p)


def test_off_by_default_refused_with_the_names(service):
    status, _, doc = service.post_run("print(1)", packages=SPECS)
    assert_error(status, doc, "packages_disabled", 400)
    assert doc["error"]["message"] == "package installs are disabled on this service: " + TELL, doc


@pytest.mark.parametrize("packages, words", [
    ({"python": ["-e ."]}, 'packages.python[0] "-e ."'),
    ({"python": ["git+https://example.com/x.git"]}, "packages.python[0]"),
    ({"python": ["requests @ https://example.com/r.whl"]}, "packages.python[0]"),
    ({"python": ["ok==1", "../evil"]}, "packages.python[1]"),
    ({"node": ["lodash", "file:../x"]}, "packages.node[1]"),
    ({"node": ["--ignore-scripts=false"]}, "packages.node[0]"),
    ({"node": ["Lodash"]}, "packages.node[0]"),
    ({"python": ["a" * 215]}, "packages.python[0]"),
    ({"python": [f"p{i}" for i in range(33)]}, "each a list of at most 32"),
    ({"ruby": ["rails"]}, "ruby"),
    ({"python": "requests"}, "each a list of at most 32"),
    ({"python": [1]}, "each a list of at most 32"),
    (["requests"], "packages must be an object"),
])
def test_bad_specs_and_shapes(on, packages, words):
    status, _, doc = on.post_run("print(1)", packages=packages)
    assert_error(status, doc, "bad_request", 400)
    assert words in doc["error"]["message"], doc


def test_offline_workspace_refused(on):
    t = gov_tenant(on, "pkoff")
    t.client.ok("PUT", "/v1/settings", json={"network_allowed": ["offline"]})
    status, _, doc = t.client.post_run("print(1)", packages=SPECS)
    assert_error(status, doc, "packages_network_not_allowed", 400)
    assert doc["error"]["message"] == ("package installs need the packages network policy, which this workspace "
                                       "does not allow (offline): " + TELL), doc


def test_no_installer_image_says_how_to_build_it(on):
    status, _, doc = on.post_run("print(1)", packages={"python": ["requests==2.31.0"]}, thread_id=tid())
    assert_error(status, doc, "packages_unavailable", 503)
    assert "`airlock image build installer`" in doc["error"]["message"], doc
    # a run that asks for none is not touched by any of it
    assert on.run("print(1)")["state"] == "succeeded"


def test_other_driver_refused(tmp_path):
    """driver = e2b pointed at nothing: the refusal comes before any call."""
    key = tmp_path / "e2b.key"
    key.write_text("e2b_nothing\n")
    key.chmod(0o600)
    svc = Service(tmp_path / "s", config={"driver": "e2b", "e2b_api_url": "http://127.0.0.1:9",
                                          "e2b_sandbox_url": "http://127.0.0.1:9", "e2b_api_key_file": str(key),
                                          "package_installs": "thread"})
    svc.start()
    try:
        status, _, doc = svc.post_run("print(1)", packages=SPECS)
        assert_error(status, doc, "packages_unsupported", 400)
        assert doc["error"]["message"] == "package installs run on the native driver; this service runs e2b", doc
    finally:
        svc.stop()


def test_thread_packages_view_empty(service):
    doc = service.ok("GET", f"/v1/threads/{tid()}/packages")
    assert doc["python"] == [] and doc["node"] == [] and doc["layer"] is None, doc
    status, _, err = service.request("GET", "/v1/threads/..%2f/packages")
    assert status in (400, 404), (status, err)


def put_thread_set(svc, t, thread, lang, specs, layer="sha256:" + "ab" * 32):
    """A thread's set as a run's install would leave it, written behind the
    service's back: what the core reads."""
    svc.sql("INSERT INTO thread_packages (org_id, workspace_id, thread_id, lang, specs, layer, resolved, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", t.org, t.workspace, thread, lang, json.dumps(specs), layer,
            json.dumps([{"name": s.split("=")[0], "version": "1.0"} for s in specs]), "2026-01-01T00:00:00.000Z")


def test_a_threads_set_reaches_every_run_of_the_thread(on):
    """A run of a thread that has a set gets it in its job without asking: on
    a service without the installer image that job cannot be built, and the
    run ends in error saying how to build it (refunded); the same run without
    the thread, or with the workspace's installs off, runs as ever. A stored
    spec that is no spec is refused when the job is built, never handed to
    pip (the differential: the same row with a valid spec fails only for the
    image)."""
    t = gov_tenant(on, "pkthr")
    thread, bad = tid(), tid()
    put_thread_set(on, t, thread, "python", ["airlock-tiny==1.0"])
    env = t.client.ok("GET", f"/v1/threads/{thread}/packages")
    assert env["python"] == ["airlock-tiny==1.0"] and env["node"] == [] and env["layer"].startswith("sha256:"), env
    assert env["resolved"]["python"][0]["version"] == "1.0", env
    before = balance(t.client)
    r = t.client.run("print(1)", thread_id=thread)
    assert r["state"] == "error" and r["error"]["code"] == "provisioning", r
    assert "`airlock image build installer`" in r["error"]["message"], r
    assert balance(t.client) == before, "an error of the service's own is refunded"
    assert t.client.run("print(1)")["state"] == "succeeded"
    put_thread_set(on, t, bad, "python", ["-e git+https://example.com/x.git"])
    r = t.client.run("print(1)", thread_id=bad)
    assert r["state"] == "error" and "holds a spec that is not one" in r["error"]["message"], r
    status, _, doc = t.client.request("GET", f"/v1/threads/{bad}/packages")
    assert status == 503 and "holds a spec that is not one" in doc["error"]["message"], (status, doc)
    # installs off: the thread's set is kept, not installed, and its runs run
    t.client.ok("PUT", "/v1/settings", json={"package_installs": "off"})
    assert t.client.run("print(1)", thread_id=thread)["state"] == "succeeded"
    assert t.client.ok("GET", f"/v1/threads/{thread}/packages")["python"] == ["airlock-tiny==1.0"]


def test_approval_card_names_the_threads_set(on):
    t = gov_tenant(on, "pkcard")
    t.client.ok("PUT", "/v1/settings", json={"approval_policy": "always"})
    thread = tid()
    put_thread_set(on, t, thread, "node", ["lodash@4.17.21"])
    status, _, doc = t.client.post_run("print(1)", thread_id=thread)
    assert status == 201 and doc["state"] == "pending_approval", doc
    card = t.client.ok("GET", f"/v1/runs/{doc['id']}")["approval"]
    assert card["packages"] == {"python": [], "node": ["lodash@4.17.21"], "asked": {"python": [], "node": []}}, card
    # a run of no thread with none: no packages on its card
    status, _, doc = t.client.post_run("print(1)")
    assert "packages" not in t.client.ok("GET", f"/v1/runs/{doc['id']}")["approval"]


def test_official_clients_refusals(service):
    """MCP's code_execution (its input schema and its refusal) and E2B's
    sandbox create metadata, through the official SDKs, on a service whose
    installs are off."""
    npm_ci()
    node_test("packages.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key},
              expect=3, pattern="refus")


# ---------------------------------------------------------------------------
# With the install: a thread's environment end to end.


class Index:
    """The tests' index (pypi_util: a PEP 503 index on loopback, named
    pypi.airlock.test, reached through the proxy with its range given in
    package_registries) serving one wheel made with the stdlib: MODULE,
    whose VERSION is the wheel's (a run that prints it imported what the
    index served, nothing else)."""

    def __init__(self):
        import pypi_util
        self.name, self.version, self.module = "airlock-svc-tiny", "4.2.17", "airlock_svc_tiny"
        self.pypi = pypi_util.PyPI().start()
        self.pypi.add(pypi_util.wheel(self.name, self.version,
                                      {f"{self.module}/__init__.py": f"VERSION = {self.version!r}\n".encode()}))
        self.spec = f"{self.name}=={self.version}"


@pytest.fixture(scope="module")
def index():
    idx = Index()
    yield idx
    idx.pypi.stop()


@pytest.fixture(scope="module")
def full(tmp_path_factory, index):
    images = installer_images()
    state = tmp_path_factory.mktemp("pkg-full")
    # the index is reached through the proxy only with its range given
    # (package_registries): loopback, on purpose; the proxy lets its port by
    svc = Service(state, config={"package_installs": "thread", "images": str(images),
                                 "package_index_python": index.pypi.url, "package_install_timeout_s": "60",
                                 "package_registries": index.pypi.registries("registry.npmjs.org")},
                  extra_env={"AIRLOCK_PROXY_PORTS": f"80,443,{index.pypi.port}"})
    svc.start()
    yield svc
    svc.stop()


def test_thread_environment_end_to_end(full, index):
    pkg, module = index.spec, index.module
    t = tid()
    full.ok("PUT", "/v1/settings", json={"network_allowed": ["offline", "packages"]})
    before = balance(full)
    r1 = full.run(f"import {module}; print({module}.VERSION)", thread_id=t, packages={"python": [pkg]})
    assert r1["state"] == "succeeded" and r1["result"]["stdout"] == "4.2.17\n", r1
    assert r1["packages"] == {"python": [pkg], "node": []}, r1
    res = r1["result"]["packages"]
    assert res["layer"].startswith("sha256:") and res["reused"] is False, res
    # charged for the install's time limit too: 60 s of install at a 60 s run's price
    assert before - balance(full) == 4, (before, balance(full))
    # the thread's set, as GET shows it and the console reads it
    env = full.ok("GET", f"/v1/threads/{t}/packages")
    assert env["python"] == [pkg] and env["layer"] == res["layer"], env
    # a later run of the thread asks for nothing and imports it (and pays the plain price)
    before = balance(full)
    r2 = full.run(f"import {module}; print({module}.VERSION)", thread_id=t)
    assert r2["state"] == "succeeded" and r2["result"]["packages"]["layer"] == res["layer"], r2
    assert r2["result"]["packages"]["reused"] is True, r2
    assert before - balance(full) == 2
    # another thread with the same set reuses the layer
    r3 = full.run(f"import {module}", thread_id=tid(), packages={"python": [pkg]})
    assert r3["result"]["packages"]["layer"] == res["layer"] and r3["result"]["packages"]["reused"], r3
    # the run's events had the installing phase and the installed layer
    evs = full.events(r1["id"])
    kinds = [e for _, e, _ in evs]
    assert kinds.index("phase") < kinds.index("installed") < kinds.index("result"), kinds
    installed = next(d for _, e, d in evs if e == "installed")
    assert installed["layer"] == res["layer"] and installed["reused"] is False, installed
    assert next(d for _, e, d in evs if e == "phase") == {"phase": "installing"}
    # pip's own words came as installing events, before the box
    assert any(e == "installing" and d["stream"] in ("stdout", "stderr") for _, e, d in evs), kinds
    # audit: the resolved set on the run's tool.call
    calls = [e for e in audit_events(full, kind="tool.call") if e["data"].get("invocation_id") == r1["id"]]
    assert calls and calls[0]["data"]["packages"]["layer"] == res["layer"], calls


def test_approval_card_names_packages_and_binds_them(full, index):
    """The card names the packages; the approved run installs exactly those,
    not a set its thread gained meanwhile (the differential: the same change
    made before a run that waits for no approval reaches its install)."""
    t = gov_tenant(full, "pkapr")
    t.client.ok("PUT", "/v1/settings", json={"network_allowed": ["offline", "packages"], "approval_policy": "always"})
    _, approver = t.person_in("approver")
    pkg, thread = index.spec, tid()
    status, _, doc = t.client.post_run(f"import {index.module}; print({index.module}.VERSION)",
                                       packages={"python": [pkg]}, thread_id=thread)
    assert status == 201 and doc["state"] == "pending_approval", doc
    card = t.client.ok("GET", f"/v1/runs/{doc['id']}")["approval"]
    assert card["packages"]["python"] == [pkg] and card["packages"]["asked"]["python"] == [pkg], card
    # the thread gains a package no index has while the run waits
    put_thread_set(full, t, thread, "python", ["no-such-package-airlock==9.9"])
    approver.ok("POST", f"/v1/runs/{doc['id']}/approve", json={})
    r = t.client.wait_state(doc["id"], ("succeeded", "failed", "error", "killed", "timed_out"))
    assert r["state"] == "succeeded" and r["result"]["stdout"] == f"{index.version}\n", r
    # without an approval the thread's set as it is at the start is installed
    t.client.ok("PUT", "/v1/settings", json={"approval_policy": "never"})
    r = t.client.run("print(1)", thread_id=thread)
    assert r["state"] == "failed" and r["result"]["reason"] == "install_failed", r


def test_official_clients_install(full, index):
    """MCP's code_execution and E2B's sandbox, through the official SDKs,
    install from the tests' index and import (the sandbox: in every command)."""
    npm_ci()
    node_test("packages.test.mjs", {"AIRLOCK_URL": full.base_url, "AIRLOCK_API_KEY": full.key,
                                    "AIRLOCK_PKG_SPEC": index.spec, "AIRLOCK_PKG_MODULE": index.module,
                                    "AIRLOCK_PKG_VERSION": index.version}, expect=2, pattern="^index: ")


def test_install_failure_is_install_failed(full):
    t = tid()
    r = full.run("print(1)", thread_id=t, packages={"python": ["no-such-package-airlock==9.9"]})
    assert r["state"] == "failed" and r["result"]["reason"] == "install_failed", r
    # nothing joined the thread's set
    assert full.ok("GET", f"/v1/threads/{t}/packages")["python"] == []
