"""The web console (issue 36): what `airlock serve` answers at /, /login and
/assets/ (the files built into the binary, with the console's headers), and
the console itself in a real browser (tests/e2e/console.test.mjs: Debian's
Chromium driven by playwright-core, with axe-core), against this module's
service. The service's workspace asks for approval of every run; its
people (an admin, an approver, a member) and a person of another
organisation sign in with links made by the real `airlock admin
login-link`, handed to the Node test in the environment.

The module's service installs packages (issue 38): its workspaces may turn
`package_installs` on, and the install box reaches the tests' own Python
index (pypi_util, on loopback, its range given in package_registries), so
that the console shows a thread's packages and a run's install. One service
for every test of the module: the browser tests share it."""
import io
import json
import os
import re
import shutil
import tarfile

import pytest

import image_util
from conftest import ROOT, need
from node_util import node_test, npm_ci
from image_util import CACHE, ensure_default_image
from service_util import MAIN_CONFIG, Service, ServiceSet, gov_tenant, put_settings

CSP = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
SHOTS = ROOT / "build" / "console-screenshots"
LINKS_PER_PERSON = 8
CONSOLE_TESTS = 13
# the package the console's thread installs from the tests' index: its
# module prints its version, which the pages must show as the index served it
PKG_NAME, PKG_VERSION, PKG_MODULE = "airlock-console-tiny", "3.1.4", "airlock_console_tiny"
# a connected folder's file named as markup: the manifest shows it as text
HOSTILE_FILE = '<img src=x onerror="window.__pwned=1">.csv'


@pytest.fixture(scope="module")
def index():
    """The tests' Python index (pypi_util) with one tiny wheel."""
    import pypi_util
    pypi = pypi_util.PyPI().start()
    pypi.add(pypi_util.wheel(PKG_NAME, PKG_VERSION, {f"{PKG_MODULE}/__init__.py": f"VERSION = {PKG_VERSION!r}\n".encode()}))
    yield pypi
    pypi.stop()


@pytest.fixture(scope="module")
def service(request, index):
    """The suite's main service, as service_util's, that may also install
    packages: the installer image beside the others (built once per
    machine, then cached), the index reached through the proxy (its port
    let by)."""
    need((ROOT / "image" / "installer").is_dir(), "the installer image's recipe (image/installer)")
    image_util.ensure_image("installer")
    ss = ServiceSet(request)
    svc = ss.start("main", {**MAIN_CONFIG, "images": str(CACHE / "images"), "package_index_python": index.url,
                            "package_install_timeout_s": "60",
                            "package_registries": index.registries("registry.npmjs.org")},
                   extra_env={"AIRLOCK_PROXY_PORTS": f"80,443,{index.port}"})
    yield svc
    ss.close()


def headers_ok(h):
    assert h.get("content-security-policy") == CSP, h
    assert h.get("x-content-type-options") == "nosniff"
    assert h.get("referrer-policy") == "no-referrer"
    assert h.get("x-frame-options") == "DENY"


def test_shell_and_assets_are_served_with_the_console_headers(service):
    for path in ("/", "/login"):
        status, h, body = service.request("GET", path, key=None)
        assert status == 200, (path, status)
        headers_ok(h)
        assert h["content-type"] == "text/html; charset=utf-8"
        text = body.decode()
        # no inline script or style: the policy would refuse them
        assert '<script type="module" src="/assets/app.js"></script>' in text
        assert not re.search(r"<script(?![^>]*\bsrc=)", text) and "<style" not in text and "style=" not in text
    status, h, _ = service.request("GET", "/assets/app.js", key=None)
    assert status == 200 and h["content-type"] == "text/javascript; charset=utf-8"
    headers_ok(h)
    assert h["cache-control"] == "no-cache" and re.fullmatch(r'"[0-9a-f]{20}"', h["etag"]), h
    # revalidated: 304 while the build is the same
    status, h2, _ = service.request("GET", "/assets/app.js", key=None, headers={"If-None-Match": h["etag"]})
    assert status == 304 and h2["etag"] == h["etag"]
    status, _, _ = service.request("GET", "/assets/app.js", key=None, headers={"If-None-Match": '"0000"'})
    assert status == 200
    for path, kind in (("/assets/pages/activity.js", "text/javascript"), ("/assets/app.css", "text/css"),
                       ("/assets/hljs-core.js", "text/javascript"), ("/assets/hljs.css", "text/css")):
        status, h, _ = service.request("HEAD", path, key=None)
        assert status == 200 and h["content-type"].startswith(kind), (path, status, h)
        headers_ok(h)


def test_nothing_outside_the_embedded_set_is_served(service):
    for path in ("/assets/nope.js", "/assets/index.html", "/assets/package.json", "/assets/..%2Fpackage.json",
                 "/assets/pages/..%2F..%2Fpackage.json", "/assets/vendor/hljs.css", "/assets/pages/nope.js",
                 "/assets/node_modules/x.js"):
        status, h, doc = service.request("GET", path, key=None)
        assert status == 404, (path, status, doc)
    status, h, doc = service.request("POST", "/assets/app.js", key=None)
    assert status == 405 and "GET" in h.get("allow", ""), (status, h)


def login_links(svc, person, n, *extra):
    """N one-time links for PERSON from the real `airlock admin login-link`."""
    links = []
    for _ in range(n):
        p = svc.admin_run("login-link", "--person", person, "--url", svc.base_url, *extra)
        assert p.returncode == 0, p.stderr.decode()
        out = p.stdout.decode().strip()
        assert re.fullmatch(re.escape(svc.base_url) + r"/login#token=ll_[A-Za-z0-9_\-]+", out), out
        links.append(out)
    return links


def test_console_in_a_browser(service, tmp_path):
    """The console's own pages in Chromium (console.test.mjs, one test per
    item of the issue): sign in with a link and out; a reused and an
    expired link refused on the page; a run requested through the API
    appearing in Activity and changing state live; an approver approving
    from the card and the output streaming on the run's page; the requester
    offered no Approve and refused by the API; a denial with its reason; an
    artifact downloaded byte for byte; another tenant seeing none of it; a
    change without the CSRF token refused; a member without the admin
    pages; the sandboxes page and Kill; a thread's packages on the
    approval card, the run's page (what was installed, the installer's
    output) and the thread's page; a connected folder's files in the
    manifest, a file named as markup shown as text. Each page screenshot
    at both sizes and checked by axe-core."""
    need(shutil.which("chromium") or os.path.exists("/usr/bin/chromium"), "Debian's chromium (scripts/deps.sh)")
    npm_ci()
    t = gov_tenant(service, "console")
    put_settings(t.client, approval_policy="always", approval_ttl_s=900, package_installs="thread",
                 network_allowed=["offline", "packages"])
    # a connected folder (`airlock admin folder add`), one of its files named as markup
    folder = tmp_path / "ledger"
    folder.mkdir()
    (folder / "q3.csv").write_bytes(b"region,revenue\nnorth,120\n")
    (folder / HOSTILE_FILE).write_bytes(b"x\n")
    service.admin("folder", "add", "--workspace", t.workspace, "ledger", str(folder))
    approver, approver_client = t.person_in("approver", name="Ada Approver")
    member, member_client = t.person_in("member", name="Max Member")
    # the member's agent asks with a key of its own name: Activity says
    # who and which agent ("Max Member · ci-agent")
    agent_key = member_client.ok("POST", "/v1/keys", json={"name": "ci-agent"}, want=201)["secret"]
    other = gov_tenant(service, "elsewhere")
    people = {"admin": (t.person, t.key), "approver": (approver, approver_client.key),
              "member": (member, agent_key), "other": (other.person, other.key)}
    env = {"AIRLOCK_URL": service.base_url, "AIRLOCK_SCREENSHOTS": str(SHOTS),
           "AIRLOCK_PKG_SPEC": f"{PKG_NAME}=={PKG_VERSION}", "AIRLOCK_PKG_NAME": PKG_NAME,
           "AIRLOCK_PKG_VERSION": PKG_VERSION, "AIRLOCK_PKG_MODULE": PKG_MODULE,
           "AIRLOCK_FOLDER": "ledger", "AIRLOCK_FOLDER_HOSTILE": HOSTILE_FILE}
    for who, (person, key) in people.items():
        env[f"AIRLOCK_KEY_{who.upper()}"] = key
        env[f"AIRLOCK_PERSON_{who.upper()}"] = person
        env[f"AIRLOCK_LINKS_{who.upper()}"] = " ".join(login_links(service, person, LINKS_PER_PERSON))
    # a link that has expired by the time the browser opens it
    env["AIRLOCK_LINK_EXPIRED"] = login_links(service, member, 1, "--ttl-s", "1")[0]
    node_test("console.test.mjs", env, expect=CONSOLE_TESTS, timeout=300)


# ------------------------------------------------------------ the admin pages
# (console-admin's block: tests/e2e/console_admin.test.mjs drives Settings →
# Code execution, Usage, Audit, Skills and Keys; a service of its own, which
# serves the bundled skills on the default image from the suite's cache)

GREETER_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["who"],
                  "properties": {"who": {"type": "string", "maxLength": 20},
                                 "times": {"type": "integer", "minimum": 1, "maximum": 3},
                                 "shout": {"type": "boolean"},
                                 "mood": {"type": "string", "enum": ["calm", "loud"]},
                                 "tags": {"type": "array", "maxItems": 5, "items": {"type": "string"}}}}
# prints the arguments it was given, exactly, and writes a file
GREETER_PY = ("import json, sys\na = json.load(open(sys.argv[1]))\nprint(json.dumps(a, sort_keys=True))\n"
              "open('/out/greeting.txt', 'w').write('hello ' + a['who'])\n")


def greeter_bundle():
    """A workspace skill's bundle (tar.gz): skill.json and greet.py, on the host's runtime."""
    manifest = {"name": "greeter", "version": "0.1.0", "description": "Greets someone; prints its arguments.",
                "image": "default" if os.environ.get("AIRLOCK_TEST_DRIVER") == "docker" else "host",
                "entrypoints": [{"name": "greet", "language": "python", "script": "greet.py",
                                 "description": "Greet WHO.", "input_schema": GREETER_SCHEMA}]}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in (("skill.json", json.dumps(manifest)), ("greet.py", GREETER_PY)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(text.encode()), 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def test_console_admin_pages(request):
    """An admin's pages in Chromium: a setting changed and its audit event
    shown; a member without Settings, refused by the API from their own
    page; a DLP pattern that does not compile refused in the API's words
    with nothing saved; a secret saved and never shown back; a key created
    (shown once, working as a Bearer key), listed and revoked; the usage
    charts with their text alternatives; the audit chain verified, its
    checkpoint, a filter and the export; the skill test bench running a
    bundled skill's entrypoint from its form."""
    need(shutil.which("chromium") or os.path.exists("/usr/bin/chromium"), "Debian's chromium (scripts/deps.sh)")
    npm_ci()
    ss = ServiceSet(request)
    svc = Service(ss.root / "console-admin", config={"skills_dir": str(ROOT / "skills")})
    ss.services.append(svc)
    ensure_default_image()      # the bundled skills' runtime (built once per machine, then cached)
    if not (svc.state / "images").exists():
        (svc.state / "images").symlink_to(CACHE / "images")
    svc.start()
    t = gov_tenant(svc, "console-admin")
    member, member_client = t.person_in("member", name="Max Member")
    # a whole CPU makes the bench's pdf-report quick; runs in two languages by two people for the charts
    put_settings(t.client, memory_mb=1024, cpus=1)
    for client, code, lang in ((t.client, "print('hello')", "python"), (t.client, "echo hi", "bash"),
                               (member_client, "print(1)", "python")):
        assert client.run(code, language=lang)["state"] == "succeeded"
    # a workspace skill, uploaded and not promoted: the bench's form of every
    # input type, and Promote (admins)
    status, _, doc = t.client.request("POST", "/v1/skills", body=greeter_bundle(),
                                      headers={"Content-Type": "application/gzip"})
    assert status == 201 and doc["state"] == "uploaded", (status, doc)
    env = {"AIRLOCK_URL": svc.base_url, "AIRLOCK_SCREENSHOTS": str(SHOTS),
           "AIRLOCK_KEY_ADMIN": t.key, "AIRLOCK_KEY_MEMBER": member_client.key}
    for who, person, n in (("admin", t.person, 6), ("member", member, 1)):
        links = login_links(svc, person, n)
        assert links, "airlock admin login-link failed"
        env[f"AIRLOCK_LINKS_{who.upper()}"] = " ".join(links)
    node_test("console_admin.test.mjs", env, expect=6, timeout=420)


# ------------------------------------------------------------ an attacker's review
# (console-webx's block: tests/e2e/console_attack.test.mjs. What a hostile
# agent or tenant controls, shown to a person in the console: markup in a
# run's fields, code and output, names and paths; an HTML artifact opened
# from the console's origin; invisible characters in code awaiting
# approval; the sign-in link; framing; an API answering garbage. Each is
# shown working against a control in the same browser, then failing
# against the console.)

# markup that runs as soon as anything parses it as HTML
XSS = '<img src=x onerror="window.__pwned=1"><svg onload="window.__pwned=1"></svg>'


def test_asset_path_tricks_reach_nothing(service):
    """Whatever a client puts in an /assets/ name (traversal, encoded and
    doubled slashes, NUL, a long name, other methods), the answer is the
    console's 404 with its headers, or 405, never a file of the disk."""
    for path in ("/assets/%2e%2e/%2e%2e/etc/passwd", "/assets/..%252Fpackage.json", "/assets/app.js%00.png",
                 "/assets/app.js%2500", "/assets/%00", "/assets/" + "a" * 4000 + ".js", "/assets/pages/" + "b" * 300,
                 "/assets/.%2e/meson.build", "/assets/pages/%2e%2e%2fapp.js", "/assets/APP.JS",
                 "/assets/..\\package.json", "/assets/pages/..%5C..%5Cpackage.json"):
        status, h, doc = service.request("GET", path, key=None)
        assert status in (400, 404, 414), (path, status, doc)
        assert b"root:" not in (doc if isinstance(doc, bytes) else json.dumps(doc).encode()), path
        # (every answer of the API says nosniff: a message may quote the path)
        assert h.get("x-content-type-options") == "nosniff", (path, status, h)
    for method in ("OPTIONS", "PUT", "DELETE"):
        status, h, _ = service.request(method, "/assets/app.js", key=None)
        assert status == 405 and "OPTIONS" not in h.get("allow", ""), (method, status, h)
    status, h, body = service.request("HEAD", "/assets/nope.js", key=None)
    assert status == 404 and not body, (status, body)


def test_console_against_a_hostile_agent(service):
    """console_attack.test.mjs: an agent of the workspace (a member's key)
    writes markup, invisible characters and an HTML artifact; the admin
    reads them in the console."""
    need(shutil.which("chromium") or os.path.exists("/usr/bin/chromium"), "Debian's chromium (scripts/deps.sh)")
    npm_ci()
    t = gov_tenant(service, "attack")
    put_settings(t.client, approval_policy="always", approval_ttl_s=900)
    # a person's name is the operator's to set, but whoever names people
    # need not be whoever reads the console: it is shown as text too
    member, member_client = t.person_in("member", name="Mallory " + XSS[:40] + "\u202e")
    env = {"AIRLOCK_URL": service.base_url, "AIRLOCK_SCREENSHOTS": str(SHOTS), "AIRLOCK_XSS": XSS,
           "AIRLOCK_KEY_ADMIN": t.key, "AIRLOCK_KEY_MEMBER": member_client.key,
           "AIRLOCK_LINKS_ADMIN": " ".join(login_links(service, t.person, 5)),
           "AIRLOCK_LINKS_MEMBER": " ".join(login_links(service, member, 1))}
    node_test("console_attack.test.mjs", env, expect=6, timeout=240)
