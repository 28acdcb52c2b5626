"""docs/openapi.json as a contract the tests hold the real service to: every
reply a test gets is checked against the schema of its operation and status
(JSON Schema 2020-12, as OpenAPI 3.1 writes it, by python3-jsonschema from
Debian), and the routes the server serves are compared with the spec's.

The server's routes come from its sources (server_routes): today the
`strcmp(seg[...], "...")` chains of src/api/http.c, from which only the
literal path segments and the methods can be read; once src/api holds a
route table, ROUTE_ROW reads its rows ({ "GET", "/v1/runs/{id}", ... }) and
the comparison becomes exact (method and path pattern). To point it at the
table: make ROUTE_ROW match a row of it and ROUTE_FILES name its file(s)."""
import json
import re

from conftest import ROOT

SPEC_PATH = ROOT / "docs" / "openapi.json"
METHODS = ("get", "put", "post", "delete", "patch")

# A row of the route table (src/api/routes.c): its method, or NULL for a
# row whose handler takes every method (MCP's) or answers what no other row
# does (a fallback), and its path pattern, {name} for a segment that varies:
#     { "GET", "/v1/runs/{id}", AL_AUTH_KEY, al_rest_runs_get },
ROUTE_ROW = re.compile(r'\{\s*(NULL|"(?:GET|POST|PUT|PATCH|DELETE)")\s*,\s*"(/[^"]*)"\s*,\s*(AL_AUTH_[A-Z_0-9]+)')
# The E2B-compatible surface is E2B's API, not airlock's: its control plane
# (AL_AUTH_E2B_KEY) follows E2B's own spec and its sandbox plane
# (AL_AUTH_SANDBOX, reached only with E2b-Sandbox-Id) is envd's, so neither
# is in docs/openapi.json; the E2B SDK's tests hold them to their contract
# (tests/e2e/e2b_*.test.mjs).
NOT_AIRLOCKS = {"AL_AUTH_E2B_KEY", "AL_AUTH_SANDBOX", "AL_AUTH_SANDBOX_OPEN"}  # E2B's API: docs/api.md
ROUTE_FILES = sorted((ROOT / "src" / "api").glob("*.c"))


def load_spec():
    return json.loads(SPEC_PATH.read_text())


def norm(path):
    """A path pattern with its variable segments made alike: /v1/runs/{}."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def operations(spec):
    """{(METHOD, path pattern): operation} of SPEC."""
    return {(m.upper(), p): op for p, ops in spec["paths"].items() for m, op in ops.items() if m in METHODS}


def server_routes():
    """(rows, literals, methods) read from the sources of src/api: ROWS the
    {(METHOD or None, path pattern)} of a route table (empty while there is none),
    LITERALS the fixed path segments the router compares, METHODS the
    request methods it compares."""
    rows, literals, methods = set(), set(), set()
    for f in ROUTE_FILES:
        # the sandbox plane's own table (envd's and the code interpreter's
        # paths, reached only with E2b-Sandbox-Id) is E2B's API whatever a
        # row's auth: its contexts are labels that need no token
        text = re.sub(r"static const al_route sandbox_routes\[\] = \{.*?\n\};", "", f.read_text(), flags=re.S)
        rows |= {(None if m == "NULL" else m.strip('"'), p) for m, p, auth in ROUTE_ROW.findall(text)
                 if auth not in NOT_AIRLOCKS}
        literals |= set(re.findall(r'strcmp\(seg\[\d\], "([^"]+)"\)', text))
        methods |= set(re.findall(r'strcmp\(method, "([A-Z]+)"\)', text))
    return rows, literals, methods


class Contract:
    """Checks replies against SPEC and remembers which (operation, status) were seen."""

    def __init__(self, spec=None):
        import jsonschema
        self.spec = spec or load_spec()
        self.ops = operations(self.spec)
        self.seen = set()
        self.validator_for = jsonschema.validators.validator_for
        self.jsonschema = jsonschema

    def schema_of(self, method, path, status, ctype):
        """The documented response of METHOD PATH with STATUS: (media type, schema or None)."""
        op = self.ops[(method, path)]
        # each status a test sees must be named: default (the error shape of
        # what a test cannot make happen, a 500) does not count
        resp = op["responses"].get(str(status))
        assert resp is not None, f"{method} {path} answered {status}, which docs/openapi.json does not name " \
                                 f"(it has {sorted(op['responses'])})"
        content = resp.get("content", {})
        media = ctype.split(";")[0].strip().lower()
        if not content:
            return media, None
        if media in content:
            return media, content[media].get("schema")
        if "*/*" in content:
            return media, None
        raise AssertionError(f"{method} {path} {status} answered {ctype!r}, documented as {sorted(content)}")

    def validate(self, schema, doc, where):
        # the schema inside a document that holds the spec's components, so
        # that its $refs (#/components/schemas/...) resolve
        root = {"$schema": "https://json-schema.org/draft/2020-12/schema", "allOf": [schema],
                "components": self.spec["components"]}
        cls = self.validator_for(root)
        errors = sorted(cls(root).iter_errors(doc), key=lambda e: list(e.absolute_path))
        if errors:
            msgs = []
            for e in errors[:8]:
                # a oneOf's failure says little: name the branch's own errors
                deep = [c for c in (e.context or []) if c.validator != "type"] or list(e.context or [])
                detail = "; ".join(f"{'/'.join(map(str, c.absolute_path))}: {c.message[:300]}" for c in deep[:4])
                msgs.append(f"at /{'/'.join(map(str, e.absolute_path))}: {e.message[:400]}" + (f" [{detail}]" if detail else ""))
            raise AssertionError(f"{where}: the reply does not match docs/openapi.json:\n  " + "\n  ".join(msgs))

    def check(self, method, path, status, hdrs, body):
        """Assert that the reply (STATUS, HDRS, BODY as Service.request gives
        it) to METHOD on the documented PATH is as documented."""
        assert (method, path) in self.ops, f"{method} {path} is not in docs/openapi.json"
        media, schema = self.schema_of(method, path, status, hdrs.get("content-type", ""))
        self.seen.add((method, path, status))
        if media == "text/event-stream" and "x-events" in self.ops[(method, path)]:
            self.check_events(self.ops[(method, path)]["x-events"], body, f"{method} {path} {status}")
        if media == "application/json":
            doc = body
            if isinstance(body, (bytes, bytearray)):
                doc = json.loads(body)
            assert schema is not None, f"{method} {path} {status}: a JSON reply with no schema in docs/openapi.json"
            self.validate(schema, doc, f"{method} {path} {status}")
        return body

    def check_events(self, schemas, body, where):
        """Each event of the stream BODY against the schema x-events gives its type."""
        text = body.decode() if isinstance(body, (bytes, bytearray)) else body
        n = 0
        for block in text.split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
            if "event" not in fields:
                continue
            assert fields["event"] in schemas, f"{where}: an event of type {fields['event']!r}, which x-events does not document"
            self.validate(schemas[fields["event"]], json.loads(fields["data"]), f"{where} event {fields.get('id')} {fields['event']}")
            n += 1
        assert n, f"{where}: a stream with no event"
        return n


def pattern_covers(row, path):
    """Whether the route pattern ROW matches the spec's PATH (normalised):
    each segment equal, or a {parameter} in ROW."""
    r, p = norm(row).strip("/").split("/"), norm(path).strip("/").split("/")
    return len(r) == len(p) and all(a == "{}" or a == b for a, b in zip(r, p))


def compare_routes(rows, ops):
    """What differs between the route table's ROWS and the spec's OPS
    ({(METHOD, path)}): (routed but not documented, documented but not
    routed). A row of every method (None) routes each documented method of
    its path; a fallback row (None, whose pattern is no documented path)
    must cover a documented path."""
    exact = {(m, norm(p)) for m, p in rows if m}
    every = {norm(p) for m, p in rows if m is None}
    spec = {(m, norm(p)) for m, p in ops}
    spec_paths = {p for _, p in spec}
    undocumented = sorted(exact - spec) + sorted(
        ("*", p) for p in every if p not in spec_paths and not any(pattern_covers(p, q) for q in spec_paths))
    unrouted = sorted((m, p) for m, p in spec if (m, p) not in exact and p not in every)
    return undocumented, unrouted
