"""Skills (issue 7, docs/api.md "Skills", skills/README.md): the bundled
skills end to end through a real service on real files, checking the
outputs themselves (the PNG decodes, the .ics parses, the PDF has its pages
and text); uploading, testing, promoting and running a workspace's own
skill; refusals (undeclared entrypoint, arguments against the schema, the
tool allow-list, unpromoted skills, non-admin promotion); tenant isolation;
and hostile bundles (traversal, absolute paths, links, devices, oversize,
bad schemas), none of which may leave anything behind."""
import base64
import csv
import io
import json
import os
import struct
import tarfile
import time
import zlib
from pathlib import Path

import pytest

from conftest import ROOT, need
from image_util import CACHE, ensure_default_image
from service_util import (Service, ServiceSet, assert_error, audit_events, gov_tenant, new_role_person, put_settings,
                          shutdown)

DATA = ROOT / "tests" / "data"
BUNDLED = {"chart-builder", "csv-cleaner", "data-profiler", "calendar-scheduler", "pdf-report"}
# pandas and matplotlib in a box: more than the default half CPU and 512 MiB make them quick
BIG = {"memory_mb": 1024, "cpus": 1, "timeout_s": 120}


# ------------------------------------------------------------------ setup


@pytest.fixture(scope="module")
def svc(request):
    ss = ServiceSet(request)
    s = Service(ss.root / "skills", config={"skills_dir": str(ROOT / "skills"), "max_concurrent": 4})
    ss.services.append(s)
    # the bundled skills run on the default image, shared from the test cache
    # (linked already when the suite's driver is docker)
    if (CACHE / "images").is_dir() and not (s.state / "images").exists():
        (s.state / "images").symlink_to(CACHE / "images")
    s.start()
    yield s
    ss.close()


@pytest.fixture(scope="module")
def image(svc):
    img = ensure_default_image()
    if not (svc.state / "images").exists():
        (svc.state / "images").symlink_to(CACHE / "images")
    return img


def put_in_thread(client, thread, files):
    """Make FILES ({name: bytes}) artifacts of THREAD, through a run that copies them to /out."""
    run = client.run("import shutil, sys\nfor n in sys.argv[1:]: shutil.copy(n, '/out/' + n)\n",
                     thread_id=thread, files=[{"name": n, "content_base64": base64.b64encode(d).decode()}
                                              for n, d in files.items()], args=list(files))
    assert run["state"] == "succeeded", run
    return {a["path"]: a for a in run["artifacts"]}


def skill_run(client, name, entrypoint, args, thread=None, want=200, **extra):
    body = {"entrypoint": entrypoint, "args": args, **extra}
    if thread:
        body["thread_id"] = thread
    status, _, doc = client.request("POST", f"/v1/skills/{name}/run", json=body, query={"wait": "true"}, timeout=300)
    assert status == want, f"POST /v1/skills/{name}/run: want {want}, got {status}: {doc!r}"
    return doc


def ok_run(client, name, entrypoint, args, thread=None, **extra):
    run = skill_run(client, name, entrypoint, args, thread, limits=BIG, **extra)
    assert run["state"] == "succeeded", json.dumps(run, indent=1)[:4000]
    assert run["skill"]["name"] == name and run["skill"]["entrypoint"] == entrypoint, run["skill"]
    assert run["skill"]["digest"].startswith("sha256:") and run["skill"]["mode"] == "run"
    return run


def content(client, artifact):
    status, hdrs, body = client.request("GET", f"/v1/artifacts/{artifact['id']}/content")
    assert status == 200, (status, body)
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def artifacts(run):
    return {a["path"]: a for a in run["artifacts"]}


def tarball(files, gz=True, extra=None):
    """A bundle: FILES {path: bytes or str}; EXTRA(tar) adds hostile members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as t:
        for path, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
        if extra:
            extra(t)
    return buf.getvalue()


HELLO_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["who"],
                "properties": {"who": {"type": "string", "maxLength": 20},
                               "times": {"type": "integer", "minimum": 1, "maximum": 3},
                               "shout": {"type": "boolean"}}}
HELLO_PY = """import json, os, sys
a = json.load(open(sys.argv[1]))
greeting = ("hello " + a["who"] + " ") * a.get("times", 1)
print(greeting.upper() if a.get("shout") else greeting)
print("args at", sys.argv[1], "files", sorted(os.listdir("/skill")))
try:
    open("/skill/lib/written", "w")
    print("SKILL DIR WRITABLE")
except OSError as e:
    print("skill dir read-only, errno", e.errno)
print("docs", sorted(os.listdir("/work/documents")) if os.path.isdir("/work/documents") else [])
open("/out/greeting.txt", "w").write(greeting)
"""


# the docker driver runs only on images (a container cannot run on the
# host's /usr)
HELLO_IMAGE = "default" if os.environ.get("AIRLOCK_TEST_DRIVER") == "docker" else "host"


def hello_bundle(version="1.0.0", name="hello", script=HELLO_PY, schema=HELLO_SCHEMA, gz=True, **manifest):
    m = {"name": name, "version": version, "description": "Greets someone.", "image": HELLO_IMAGE,
         "entrypoints": [{"name": "greet", "language": "python", "script": "lib/greet.py",
                          "description": "Greet WHO, TIMES times.", "input_schema": schema},
                         {"name": "count", "language": "bash", "script": "count.sh",
                          "description": "Count the documents.", "input_schema": {"type": "object"}}]}
    m.update(manifest)
    return tarball({"skill.json": json.dumps(m), "lib/greet.py": script,
                    "count.sh": 'ls /work/documents | wc -l; cat "$1"\n'}, gz=gz)


def upload(client, body, want=201):
    status, _, doc = client.request("POST", "/v1/skills", body=body, headers={"Content-Type": "application/gzip"})
    assert status == want, f"POST /v1/skills: want {want}, got {status}: {doc!r}"
    return doc


def host_module(name, package):
    """A checker from Debian on the host (scripts/deps.sh installs it)."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError:
        need(False, f"{package} is not installed (scripts/deps.sh installs it)")


# ---------------------------------------------------------- the catalogue


def test_bundled_skills_are_listed(svc):
    doc = svc.ok("GET", "/v1/skills")
    by = {s["name"]: s for s in doc["skills"]}
    assert BUNDLED <= set(by), sorted(by)
    for name in BUNDLED:
        s = by[name]
        assert s["source"] == "bundled" and s["state"] == "bundled" and s["digest"].startswith("sha256:"), s
        assert s["entrypoints"] and all(e["input_schema"]["type"] == "object" for e in s["entrypoints"]), s
        assert svc.ok("GET", f"/v1/skills/{name}")["digest"] == s["digest"]
    assert_error(*svc.request("GET", "/v1/skills/no-such-skill")[::2], "not_found", 404)
    assert_error(*svc.request("GET", "/v1/skills/Bad_Name")[::2], "not_found", 404)
    status, _, _ = svc.request("GET", "/v1/skills", key=None)
    assert status == 401


# --------------------------------------------------------- bundled skills


def png_pixels(data):
    """(width, height, colour type, rows of raw pixel bytes): IHDR parsed and
    the IDAT stream inflated and unfiltered by hand, so the PNG is checked
    to decode without trusting any one library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    pos, chunks = 8, []
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xffffffff == crc, f"bad CRC in {kind}"
        chunks.append((kind, body))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert depth == 8 and interlace == 0, (depth, interlace)
    bpp = {2: 3, 6: 4, 0: 1, 4: 2}[ctype]
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    stride = w * bpp
    assert len(raw) == h * (stride + 1), (len(raw), w, h)
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, ctype, rows


def test_chart_builder(svc, image):
    thread = f"chart-{time.monotonic_ns()}"
    put_in_thread(svc, thread, {"sales.csv": (DATA / "sales.csv").read_bytes()})
    run = ok_run(svc, "chart-builder", "chart", {"input": "documents/sales.csv", "x": "month",
                                                "y": ["north", "south"], "kind": "line", "title": "Sales 2024",
                                                "width": 640, "height": 400, "output": "sales.png"}, thread)
    summary = json.loads(run["result"]["stdout"])
    assert summary == {"output": "sales.png", "rows": 12, "series": ["north", "south"], "kind": "line",
                       "size": [640, 400]}, summary
    png = content(svc, artifacts(run)["sales.png"])
    assert artifacts(run)["sales.png"]["content_type"] == "image/png"
    w, h, ctype, rows = png_pixels(png)
    assert (w, h) == (640, 400)
    bpp = {2: 3, 6: 4}[ctype]
    colours = {row[i:i + 3] for row in rows[::4] for i in range(0, len(row), bpp * 4)}
    # a white page with axes, two coloured lines, labels: many colours, not a blank image
    assert len(colours) > 20, len(colours)
    # matplotlib's default first two colours (the two series) are drawn
    blue, orange = bytes([0x1f, 0x77, 0xb4]), bytes([0xff, 0x7f, 0x0e])
    pixels = {row[i:i + 3] for row in rows for i in range(0, len(row), bpp)}
    assert blue in pixels and orange in pixels
    Image = host_module("PIL.Image", "python3-pil")  # a second, independent decoder
    im = Image.open(io.BytesIO(png))
    im.load()
    assert im.size == (640, 400)
    # an unknown column is the script's clear failure, not a crash of the service
    bad = skill_run(svc, "chart-builder", "chart", {"input": "documents/sales.csv", "x": "nope"}, thread, limits=BIG)
    assert bad["state"] == "failed" and "no column 'nope'" in bad["result"]["stderr"], bad["result"]


def test_csv_cleaner(svc, image):
    thread = f"clean-{time.monotonic_ns()}"
    put_in_thread(svc, thread, {"messy.csv": (DATA / "messy.csv").read_bytes()})
    run = ok_run(svc, "csv-cleaner", "clean", {"input": "documents/messy.csv", "missing": "fill"}, thread)
    arts = artifacts(run)
    assert {"cleaned.csv", "cleaning_report.md", "cleaning_report.json"} <= set(arts), arts
    rows = list(csv.DictReader(io.StringIO(content(svc, arts["cleaned.csv"]).decode())))
    assert [r["id"] for r in rows] == ["1", "2", "3", "4", "5", "6"], rows
    assert list(rows[0]) == ["id", "name", "signup", "score", "active", "revenue"]
    assert [r["name"] for r in rows] == ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank"]
    assert rows[0]["revenue"] == "1200" and rows[5]["revenue"] == "400"
    assert rows[0]["active"] == "True" and rows[1]["active"] == "False"
    # score: missing for Bob and Eve, filled with the median of 88.5, 92, 75.25, 61
    assert float(rows[1]["score"]) == float(rows[4]["score"]) == 81.875
    rep = json.loads(content(svc, arts["cleaning_report.json"]))
    assert rep["rows_in"] == 8 and rep["rows_out"] == 6 and rep["duplicates_removed"] == 2, rep
    types = {c: i["type"] for c, i in rep["columns"].items()}
    assert types == {"id": "integer", "name": "text", "signup": "date", "score": "number", "active": "boolean",
                     "revenue": "integer"}, types
    assert rep["columns"]["score"]["missing_before"] == 3 and rep["columns"]["score"]["missing_after"] == 0
    assert rep["filled"]["score"] == {"count": 2, "value": 81.875}, rep["filled"]
    md = content(svc, arts["cleaning_report.md"]).decode()
    assert "duplicate rows removed: 2" in md and "| revenue | integer |" in md, md
    # the same input, keeping missing values and dropping rows that have any
    run = ok_run(svc, "csv-cleaner", "clean", {"input": "documents/messy.csv", "missing": "drop_rows",
                                              "output": "strict.csv"}, thread)
    rows = list(csv.DictReader(io.StringIO(content(svc, artifacts(run)["strict.csv"]).decode())))
    assert [r["name"] for r in rows] == ["Alice", "Carol"], rows


def test_csv_cleaner_takes_each_iso_8601_form_of_a_date_column(svc, image):
    """pandas 2 (the default image since Debian 13) parses a column in the
    format of its first value: a time after a plain date was NaT there, and
    the column was left text; pandas 1.5 took each value's own form."""
    thread = f"dates-{time.monotonic_ns()}"
    put_in_thread(svc, thread, {"when.csv": b"id,when\n1,2024-01-05\n2,2024-01-06 10:30\n3,2024-02-01T08:00:00\n"})
    run = ok_run(svc, "csv-cleaner", "clean", {"input": "documents/when.csv"}, thread)
    assert json.loads(run["result"]["stdout"])["types"] == {"id": "integer", "when": "date"}, run["result"]
    rows = list(csv.DictReader(io.StringIO(content(svc, artifacts(run)["cleaned.csv"]).decode())))
    assert [r["when"] for r in rows] == ["2024-01-05 00:00:00", "2024-01-06 10:30:00", "2024-02-01 08:00:00"], rows


def test_data_profiler_csv_and_xlsx(svc, image):
    thread = f"prof-{time.monotonic_ns()}"
    put_in_thread(svc, thread, {"sales.csv": (DATA / "sales.csv").read_bytes()})
    # an XLSX made with openpyxl in a box on the image: two sheets, the second the data
    mk = svc.run("import csv, openpyxl\nwb = openpyxl.Workbook()\nwb.active.title = 'notes'\n"
                 "wb.active.append(['nothing here'])\nws = wb.create_sheet('data')\n"
                 "for i, row in enumerate(csv.reader(open('/work/documents/sales.csv'))):\n"
                 "    ws.append(row if i == 0 else [row[0]] + [int(v) for v in row[1:]])\n"
                 "ws.append(['2025-01', None, 180, 150])\nwb.save('/out/sales.xlsx')\n",
                 thread_id=thread, image="default", limits=BIG)
    assert mk["state"] == "succeeded", mk
    north = [int(r["north"]) for r in csv.DictReader(open(DATA / "sales.csv"))]
    run = ok_run(svc, "data-profiler", "profile", {"input": "documents/sales.csv"}, thread)
    prof = json.loads(content(svc, artifacts(run)["profile.json"]))
    assert prof["rows"] == 12 and prof["columns"] == 4 and prof["format"] == "csv", prof
    f = {x["name"]: x for x in prof["fields"]}
    assert f["north"]["type"] == "integer" and f["north"]["min"] == min(north) and f["north"]["max"] == max(north)
    assert abs(f["north"]["mean"] - sum(north) / len(north)) < 1e-6
    assert f["month"]["type"] == "text" and f["month"]["distinct"] == 12
    md = content(svc, artifacts(run)["profile.md"]).decode()
    assert md.startswith("# Profile of documents/sales.csv") and "| north | integer | 0 (0.0%) | 12 |" in md, md
    run = ok_run(svc, "data-profiler", "profile", {"input": "documents/sales.xlsx", "sheet": "data",
                                                  "name": "xlsx-profile"}, thread)
    prof = json.loads(content(svc, artifacts(run)["xlsx-profile.json"]))
    assert prof["format"] == "xlsx" and prof["sheet"] == "data" and prof["sheets"] == ["notes", "data"], prof
    f = {x["name"]: x for x in prof["fields"]}
    assert prof["rows"] == 13 and f["north"]["missing"] == 1 and f["north"]["max"] == max(north), f["north"]
    assert f["south"]["max"] == 180
    assert "xlsx-profile.md" in artifacts(run)
    bad = skill_run(svc, "data-profiler", "profile", {"input": "documents/sales.xlsx", "sheet": "nope"}, thread,
                    limits=BIG)
    assert bad["state"] == "failed" and "no sheet 'nope'" in bad["result"]["stderr"]


def check_ics(data):
    """RFC 5545's framing rules, checked strictly on the bytes: CRLF line
    ends, at most 75 octets a line, folding by a leading space, the
    calendar's required properties, and each event's UID and DTSTAMP."""
    assert data.endswith(b"\r\n") and b"\n" not in data.replace(b"\r\n", b""), "bare LF or CR"
    physical = data[:-2].split(b"\r\n")
    for line in physical:
        assert len(line) <= 75, (len(line), line)
    logical = []
    for line in physical:
        if line.startswith(b" "):
            logical[-1] += line[1:]
        else:
            logical.append(line)
    text = [l.decode("utf-8") for l in logical]
    assert text[0] == "BEGIN:VCALENDAR" and text[-1] == "END:VCALENDAR"
    assert "VERSION:2.0" in text and any(l.startswith("PRODID:") for l in text)
    events, cur = [], None
    for l in text:
        if l == "BEGIN:VEVENT":
            cur = []
        elif l == "END:VEVENT":
            events.append(cur)
            cur = None
        elif cur is not None:
            cur.append(l)
    for ev in events:
        names = [l.split(":", 1)[0].split(";", 1)[0] for l in ev]
        for req in ("UID", "DTSTAMP", "DTSTART"):
            assert names.count(req) == 1, (req, ev)
        assert any(l.startswith("DTSTAMP:") and l.endswith("Z") and len(l) == len("DTSTAMP:20250101T000000Z")
                   for l in ev), ev
    return events, physical


def test_calendar_scheduler(svc, image):
    long_desc = "Agenda: budget, hiring; and the roadmap. " * 6 + "Café ☕ and naïve résumé 日本語 " * 4
    events = [
        {"summary": "Planning, Q3", "start": "2025-03-04T09:00:00+01:00", "end": "2025-03-04T10:30:00+01:00",
         "location": "Room 4; 2nd floor", "description": long_desc, "attendees": ["ana@example.com", "bo@example.org"]},
        {"summary": "1:1", "start": "2025-03-04T09:15:00Z", "duration_minutes": 30},
        {"summary": "Offsite", "start": "2025-03-10", "end": "2025-03-12"},
        {"summary": "Lunch", "start": "2025-03-05T12:00:00", "duration_minutes": 45},
    ]
    run = ok_run(svc, "calendar-scheduler", "schedule", {"calendar_name": "Team", "events": events,
                                                        "output": "team.ics"})
    summary = json.loads(run["result"]["stdout"])
    # 09:00-10:30 +01:00 is 08:00-09:30 UTC, which overlaps the 09:15Z 1:1
    assert summary == {"output": "team.ics", "events": 4, "overlaps": [[0, 1]]}, summary
    art = artifacts(run)["team.ics"]
    assert art["content_type"] == "text/calendar"
    data = content(svc, art)
    evs, physical = check_ics(data)
    assert len(evs) == 4
    assert any(l.startswith(b" ") for l in physical), "the long description must be folded"
    flat = [dict(l.split(":", 1) for l in ev) for ev in evs]
    assert flat[0]["DTSTART"] == "20250304T080000Z" and flat[0]["DTEND"] == "20250304T093000Z"
    assert flat[0]["SUMMARY"] == "Planning\\, Q3" and flat[0]["LOCATION"] == "Room 4\\; 2nd floor"
    assert flat[2]["DTSTART;VALUE=DATE"] == "20250310" and flat[2]["DTEND;VALUE=DATE"] == "20250312"
    assert flat[3]["DTSTART"] == "20250305T120000" and flat[3]["DTEND"] == "20250305T124500"
    assert len({f["UID"] for f in flat}) == 4
    # a second, independent parser: Debian's python3-icalendar
    icalendar = host_module("icalendar", "python3-icalendar")
    cal = icalendar.Calendar.from_ical(data)
    vevents = cal.walk("VEVENT")
    assert [str(e["SUMMARY"]) for e in vevents] == ["Planning, Q3", "1:1", "Offsite", "Lunch"]
    assert str(vevents[0]["DESCRIPTION"]) == long_desc
    assert str(vevents[0]["LOCATION"]) == "Room 4; 2nd floor"
    assert [str(a) for a in vevents[0]["ATTENDEE"]] == ["mailto:ana@example.com", "mailto:bo@example.org"]
    # an event that ends before it starts is refused by the script, clearly
    bad = skill_run(svc, "calendar-scheduler", "schedule",
                    {"events": [{"summary": "x", "start": "2025-03-04T10:00:00Z", "end": "2025-03-04T09:00:00Z"}]},
                    limits=BIG)
    assert bad["state"] == "failed" and "before it starts" in bad["result"]["stderr"], bad["result"]


def test_pdf_report(svc, image):
    Image = host_module("PIL.Image", "python3-pil")
    thread = f"pdf-{time.monotonic_ns()}"
    buf = io.BytesIO()
    Image.new("RGB", (300, 150), (30, 120, 200)).save(buf, "PNG")
    put_in_thread(svc, thread, {"figure.png": buf.getvalue(),
                                "notes.md": b"# Findings\n\nSales **grew** in *every* region.\n\n"
                                            b"![Figure 1: sales](figure.png)\n\n<!-- pagebreak -->\n\n"
                                            b"## Details\n\n- north up 117%\n- south up 84%\n\n"
                                            b"| region | growth |\n|---|---|\n| north | 117% |\n| south | 84% |\n\n"
                                            b"<!-- pagebreak -->\n\n## Appendix\n\n```\nraw = 1\n```\n"})
    run = ok_run(svc, "pdf-report", "build", {"input": "documents/notes.md", "title": "Quarterly review",
                                             "author": "airlock tests"}, thread)
    assert json.loads(run["result"]["stdout"]) == {"output": "report.pdf", "pages": 3}
    data = content(svc, artifacts(run)["report.pdf"])
    assert data.startswith(b"%PDF-")
    pypdf = host_module("pypdf", "python3-pypdf")
    pdf = pypdf.PdfReader(io.BytesIO(data))
    assert len(pdf.pages) == 3
    texts = [p.extract_text() for p in pdf.pages]
    assert "Quarterly review" in texts[0] and "Findings" in texts[0] and "Figure 1: sales" in texts[0], texts[0]
    assert "Details" in texts[1] and "north up 117%" in texts[1] and "region" in texts[1], texts[1]
    assert "Appendix" in texts[2] and "raw = 1" in texts[2], texts[2]
    assert pdf.metadata.title == "Quarterly review" and pdf.metadata.author == "airlock tests"
    # the image is embedded on page 1
    xobjs = pdf.pages[0]["/Resources"]["/XObject"]
    sizes = [(x.get_object()["/Width"], x.get_object()["/Height"]) for x in xobjs.values()]
    assert (300, 150) in sizes, sizes
    # inline Markdown too, and a missing image is a clear failure
    run = ok_run(svc, "pdf-report", "build", {"markdown": "# One\n\ntext\n", "output": "one.pdf"}, thread)
    assert len(pypdf.PdfReader(io.BytesIO(content(svc, artifacts(run)["one.pdf"]))).pages) == 1
    bad = skill_run(svc, "pdf-report", "build", {"markdown": "![x](nope.png)"}, thread, limits=BIG)
    assert bad["state"] == "failed" and "image 'nope.png' not found" in bad["result"]["stderr"]


# --------------------------------------------- a workspace's own skill


def test_skill_runs_take_a_network_policy_within_the_workspace_allow_list(svc, image):
    events = [{"summary": "x", "start": "2025-03-04T10:00:00Z", "duration_minutes": 5}]
    refused = skill_run(svc, "calendar-scheduler", "schedule", {"events": events}, want=403, network="hosts:example.org")
    assert refused["error"]["code"] == "network_not_allowed", refused   # no host is listed yet
    put_settings(svc, network_hosts=["example.org"])
    run = ok_run(svc, "calendar-scheduler", "schedule", {"events": events}, network="hosts:example.org")
    assert run["network"] == "hosts:example.org" and run["result"]["network"]["mode"] == "hosts", run["network"]
    refused = skill_run(svc, "calendar-scheduler", "schedule", {"events": events}, want=403, network="internet")
    assert refused["error"]["code"] == "network_not_allowed", refused
    bad = skill_run(svc, "calendar-scheduler", "schedule", {"events": events}, want=400, network="wifi")
    assert "unknown network policy" in bad["error"]["message"], bad


def test_versions_per_skill_are_capped(svc):
    t = gov_tenant(svc, "versions")
    for i in range(20):
        upload(t.client, hello_bundle(version=f"1.0.{i}", name="many"))
    status, _, doc = t.client.request("POST", "/v1/skills", body=hello_bundle(version="1.0.20", name="many"),
                                      headers={"Content-Type": "application/gzip"})
    assert status == 409 and doc["error"]["code"] == "too_many_versions", doc
    # the same bundle again is the same version, not a new one
    upload(t.client, hello_bundle(version="1.0.3", name="many"), want=200)


def test_skill_bundles_count_against_the_storage_quota(tmp_path):
    """Unpacked bundle bytes count once per organisation, with artifacts; a
    member cannot fill the disk with cheap, highly compressed uploads."""
    svc = Service(tmp_path / "state", config={"storage_quota_mb": 2}).start()
    try:
        t = gov_tenant(svc, "quota")
        _, member = new_role_person(svc, t.workspace, "quota-member", "member")
        big = lambda v: tarball({"skill.json": _manifest(name="big", version=v), "e.py": "", "z.bin": bytes(900 << 10)})
        upload(member, big("1"))
        upload(member, big("2"))                      # 1.8 MiB of 2
        stored = lambda: sorted(d.name for d in (tmp_path / "state" / "skills").iterdir() if d.name.startswith("sha256-"))
        before = stored()
        status, _, doc = member.request("POST", "/v1/skills", body=big("3"), headers={"Content-Type": "application/gzip"})
        assert status == 507 and doc["error"]["code"] == "quota_exceeded", doc
        # the refused bundle was not kept on disk
        assert stored() == before
        # the same bundle again needs no more room
        upload(member, big("2"), want=200)
    finally:
        shutdown(svc)


def test_upload_test_promote_run(svc):
    admin = svc
    member_id, member = new_role_person(svc, _workspace(svc), f"skill-member-{time.monotonic_ns()}", "member")
    name = f"hello-{time.monotonic_ns() % 10**9}"
    body = hello_bundle(name=name)
    doc = upload(member, body)
    assert doc["name"] == name and doc["state"] == "uploaded" and doc["source"] == "workspace", doc
    assert [e["name"] for e in doc["entrypoints"]] == ["greet", "count"]
    digest = doc["digest"]
    # the same bundle again is the same version
    again = upload(member, body, want=200)
    assert again["digest"] == digest
    # not runnable by agents before promotion
    err = skill_run(member, name, "greet", {"who": "ann"}, want=409)
    assert err["error"]["code"] == "not_promoted" and "promote" in err["error"]["message"], err
    # the test bench runs it (and waits)
    status, _, run = member.request("POST", f"/v1/skills/{name}/test",
                                    json={"entrypoint": "greet", "args": {"who": "ann", "times": 2}}, timeout=120)
    assert status == 200 and run["state"] == "succeeded", run
    out = run["result"]["stdout"]
    assert out.startswith("hello ann hello ann \n"), out
    assert "args at /work/args.json files ['count.sh', 'lib', 'skill.json']" in out, out
    assert "skill dir read-only, errno 30" in out and "WRITABLE" not in out, out
    assert run["skill"] == {"name": name, "version": "1.0.0", "digest": digest, "entrypoint": "greet", "mode": "test"}
    assert run["description"] == f"skill {name} 1.0.0, entrypoint greet (test bench)", run["description"]
    assert artifacts(run)["greeting.txt"]["size"] == len("hello ann hello ann ")
    # members do not promote
    status, _, err = member.request("POST", f"/v1/skills/{name}/promote")
    assert_error(status, err, "forbidden", 403)
    doc = admin.ok("POST", f"/v1/skills/{name}/promote")
    assert doc["state"] == "promoted" and doc["promoted_at"] and doc["digest"] == digest
    run = skill_run(member, name, "greet", {"who": "bo", "shout": True})
    assert run["state"] == "succeeded" and run["result"]["stdout"].startswith("HELLO BO"), run
    assert run["skill"]["mode"] == "run"
    # a new upload is testable, while agents keep running the promoted version
    v2 = upload(member, hello_bundle(version="2.0.0", name=name, script=HELLO_PY.replace("hello ", "hi ")))
    assert v2["digest"] != digest and v2["state"] == "uploaded"
    run = skill_run(member, name, "greet", {"who": "cy"})
    assert run["result"]["stdout"].startswith("hello cy") and run["skill"]["version"] == "1.0.0", run
    status, _, t2 = member.request("POST", f"/v1/skills/{name}/test", json={"entrypoint": "greet", "args": {"who": "cy"}},
                                   timeout=120)
    assert status == 200 and t2["result"]["stdout"].startswith("hi cy") and t2["skill"]["version"] == "2.0.0", t2
    got = member.ok("GET", f"/v1/skills/{name}")
    assert got["digest"] == digest and [v["version"] for v in got["versions"]] == ["2.0.0", "1.0.0"], got
    listed = [s for s in member.ok("GET", "/v1/skills")["skills"] if s["name"] == name]
    assert len(listed) == 1 and listed[0]["state"] == "promoted" and listed[0]["version"] == "1.0.0", listed
    # promoting v2 by digest switches what agents run
    admin.ok("POST", f"/v1/skills/{name}/promote", json={"digest": v2["digest"]})
    run = skill_run(member, name, "greet", {"who": "di"})
    assert run["result"]["stdout"].startswith("hi di") and run["skill"]["version"] == "2.0.0", run
    # a thread's artifacts are the skill's inputs, and a bash entrypoint gets the args path too
    thread = f"hello-{time.monotonic_ns()}"
    put_in_thread(member, thread, {"a.txt": b"a", "b.txt": b"b"})
    run = skill_run(member, name, "count", {"x": 1}, thread=thread)
    assert run["state"] == "succeeded" and run["result"]["stdout"] == '2\n{"x":1}', run["result"]
    # the audit says which tool ran
    evs = audit_events(member, run_id=run["id"])
    kinds = {e["kind"]: e for e in evs}
    assert kinds["capability.invoke_allowed"]["data"]["tool"] == "run_skill_script", evs
    assert kinds["tool.call"]["data"]["tool"] == "run_skill_script" and kinds["tool.call"]["data"]["state"] == "succeeded"
    ups = audit_events(member, kind="skill.uploaded")
    assert any(e["data"]["skill"] == name and e["person_id"] == member_id for e in ups), ups
    assert any(e["data"]["skill"] == name for e in audit_events(member, kind="skill.promoted"))


def _workspace(svc):
    """The bootstrap tenant's workspace (the service's own key is its admin's)."""
    import re
    m = re.search(r"\b(ws_[a-z0-9]+)", svc.admin("list"))
    assert m, "airlock admin list shows no workspace"
    return m.group(1)


def test_refusals(svc):
    name = f"refuse-{time.monotonic_ns() % 10**9}"
    upload(svc, hello_bundle(name=name))
    svc.ok("POST", f"/v1/skills/{name}/promote")
    cases = [
        ({"entrypoint": "nope", "args": {}}, "has no entrypoint \"nope\" (its entrypoints: greet, count)"),
        ({"entrypoint": "greet", "args": {}}, "args.who: is required"),
        ({"entrypoint": "greet", "args": {"who": 3}}, "args.who: must be a string"),
        ({"entrypoint": "greet", "args": {"who": "x" * 21}}, "args.who: must be at most 20 characters"),
        ({"entrypoint": "greet", "args": {"who": "a", "times": 4}}, "args.times: must be at most 3"),
        ({"entrypoint": "greet", "args": {"who": "a", "times": 1.5}}, "args.times: must be an integer"),
        ({"entrypoint": "greet", "args": {"who": "a", "loud": True}}, "unknown property \"loud\""),
        ({"entrypoint": "greet", "args": [1]}, "args: must be a JSON object"),
        ({"entrypoint": "greet", "args": {"who": "a"}, "thread_id": "../x"}, "thread_id"),
        ({"entrypoint": "greet", "args": {"who": "a"}, "extra": 1}, "unknown field \"extra\""),
        ({"args": {"who": "a"}}, "entrypoint"),
    ]
    before = len(svc.ok("GET", "/v1/runs", query={"limit": "200"})["runs"])
    for body, msg in cases:
        status, _, err = svc.request("POST", f"/v1/skills/{name}/run", json=body)
        assert_error(status, err, "bad_request", 400)
        assert msg in err["error"]["message"], (body, err)
    # nothing was recorded for a refused call
    assert len(svc.ok("GET", "/v1/runs", query={"limit": "200"})["runs"]) == before
    status, _, err = svc.request("POST", "/v1/skills/no-such/run", json={"entrypoint": "x", "args": {}})
    assert_error(status, err, "not_found", 404)
    status, _, err = svc.request("GET", f"/v1/skills/{name}/run")
    assert status == 405
    status, _, err = svc.request("POST", f"/v1/skills/{name}/promote", json={"digest": "sha256:" + "0" * 64})
    assert_error(status, err, "not_found", 404)
    status, _, err = svc.request("POST", "/v1/skills/pdf-report/promote")
    assert_error(status, err, "conflict", 409)


def test_tool_allow_list_governs_skill_runs(svc):
    from service_util import gov_tenant
    t = gov_tenant(svc, "skl")
    name = f"gov-{time.monotonic_ns() % 10**9}"
    upload(t.client, hello_bundle(name=name))
    t.client.ok("POST", f"/v1/skills/{name}/promote")
    put_settings(t.client, tools=["code_execution"])
    for path in (f"/v1/skills/{name}/run", f"/v1/skills/{name}/test"):
        status, _, err = t.client.request("POST", path, json={"entrypoint": "greet", "args": {"who": "a"}})
        assert_error(status, err, "tool_not_allowed", 403)
        assert "run_skill_script" in err["error"]["message"]
    denied = audit_events(t.client, kind="capability.invoke_denied")
    assert any(e["data"]["tool"] == "run_skill_script" for e in denied), denied
    # code execution itself is still allowed; and back on the list, the skill runs
    assert t.client.run("print(1)")["state"] == "succeeded"
    put_settings(t.client, tools=["code_execution", "run_skill_script"])
    run = skill_run(t.client, name, "greet", {"who": "z"})
    assert run["state"] == "succeeded", run
    # charged like any run
    assert run["price"] == 2


def test_tenant_isolation(svc):
    from service_util import gov_tenant
    a, b = gov_tenant(svc, "ska"), gov_tenant(svc, "skb")
    name = f"mine-{time.monotonic_ns() % 10**9}"
    doc = upload(a.client, hello_bundle(name=name))
    a.client.ok("POST", f"/v1/skills/{name}/promote")
    assert name not in {s["name"] for s in b.client.ok("GET", "/v1/skills")["skills"]}
    assert BUNDLED <= {s["name"] for s in b.client.ok("GET", "/v1/skills")["skills"]}
    assert_error(*b.client.request("GET", f"/v1/skills/{name}")[::2], "not_found", 404)
    for path in ("run", "test"):
        status, _, err = b.client.request("POST", f"/v1/skills/{name}/{path}", json={"entrypoint": "greet",
                                                                                   "args": {"who": "x"}})
        assert_error(status, err, "not_found", 404)
    assert_error(*b.client.request("POST", f"/v1/skills/{name}/promote")[::2], "not_found", 404)
    # B may upload a skill of the same name: its own, separate
    other = upload(b.client, hello_bundle(name=name, version="9.9.9"))
    assert other["digest"] != doc["digest"]
    assert a.client.ok("GET", f"/v1/skills/{name}")["version"] == "1.0.0"
    # a bundled skill's name is taken
    status, _, err = a.client.request("POST", "/v1/skills", body=hello_bundle(name="pdf-report"))
    assert_error(status, err, "conflict", 409)


# ------------------------------------------------------- hostile bundles


def _symlink(t):
    i = tarfile.TarInfo("lib/link.py")
    i.type, i.linkname = tarfile.SYMTYPE, "/etc/shadow"
    t.addfile(i)


def _hardlink(t):
    i = tarfile.TarInfo("lib/hard.py")
    i.type, i.linkname = tarfile.LNKTYPE, "skill.json"
    t.addfile(i)


def _device(t):
    i = tarfile.TarInfo("lib/null")
    i.type, i.devmajor, i.devminor = tarfile.CHRTYPE, 1, 3
    t.addfile(i)


def _fifo(t):
    i = tarfile.TarInfo("lib/fifo")
    i.type = tarfile.FIFOTYPE
    t.addfile(i)


def _member(path, data=b"x"):
    def add(t):
        i = tarfile.TarInfo(path)
        i.size = len(data)
        t.addfile(i, io.BytesIO(data))
    return add


def _dot_dirs(n):
    def add(t):
        for _ in range(n):
            i = tarfile.TarInfo("./")
            i.type = tarfile.DIRTYPE
            t.addfile(i)
    return add


def _manifest(**changes):
    m = {"name": "bad", "version": "1", "description": "d", "image": "host",
         "entrypoints": [{"name": "e", "language": "python", "script": "e.py", "description": "d",
                          "input_schema": {"type": "object"}}]}
    m.update(changes)
    return json.dumps(m)


HOSTILE = [
    ("traversal", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_member("../escaped.py")), 400, ".."),
    ("deep traversal", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_member("lib/../../../tmp/x")), 400, ".."),
    ("absolute", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_member("/tmp/airlock-skill-abs")), 400,
     "absolute"),
    ("symlink", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_symlink), 400, "is a link"),
    ("hard link", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_hardlink), 400, "is a link"),
    ("device", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_device), 400, "device"),
    ("fifo", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_fifo), 400, "fifo"),
    ("too deep", tarball({"skill.json": _manifest(), "e.py": "", "1/2/3/4/5/6/7/8/9.py": ""}), 400, "deeper"),
    ("too many files", tarball({"skill.json": _manifest(), "e.py": "", **{f"f{i}": "" for i in range(300)}}), 413,
     "more than 256 files"),
    # 18 MiB of zeros compress to a small body: the unpacked size is what counts
    ("gzip bomb", tarball({"skill.json": _manifest(), "e.py": "", "a.bin": bytes(9 << 20), "b.bin": bytes(9 << 20)}),
     413, "exceed 16777216 bytes unpacked"),
    ("one big file", tarball({"skill.json": _manifest(), "e.py": "", "big.bin": bytes(17 << 20)}), 413,
     "larger than 16777216"),
    ("twice", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_member("e.py")), 400, "twice"),
    ("no manifest", tarball({"e.py": ""}), 400, "no skill.json"),
    ("manifest not JSON", tarball({"skill.json": "{", "e.py": ""}), 400, "not JSON"),
    ("missing script", tarball({"skill.json": _manifest()}), 400, "not a file of the bundle"),
    ("script is a dir", tarball({"skill.json": _manifest(), "e.py/x": ""}), 400, "not a file of the bundle"),
    ("bad name", tarball({"skill.json": _manifest(name="../x"), "e.py": ""}), 400, "\"name\""),
    ("script outside", tarball({"skill.json": _manifest(entrypoints=[{
        "name": "e", "language": "python", "script": "../../etc/passwd", "description": "d",
        "input_schema": {"type": "object"}}])}), 400, ".."),
    ("bad schema", tarball({"skill.json": _manifest(entrypoints=[{
        "name": "e", "language": "python", "script": "e.py", "description": "d",
        "input_schema": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}}]),
        "e.py": ""}), 400, "unsupported schema keyword \"pattern\""),
    ("schema not object", tarball({"skill.json": _manifest(entrypoints=[{
        "name": "e", "language": "python", "script": "e.py", "description": "d",
        "input_schema": {"type": "array"}}]), "e.py": ""}), 400, "top level"),
    ("bad language", tarball({"skill.json": _manifest(entrypoints=[{
        "name": "e", "language": "ruby", "script": "e.py", "description": "d",
        "input_schema": {"type": "object"}}]), "e.py": ""}), 400, "language"),
    # "." is the top directory: counted like any entry, and never a file
    ("data under .", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_member(".", bytes(1 << 20))), 400,
     "not the top directory"),
    ("flood of ./", tarball({"skill.json": _manifest(), "e.py": ""}, extra=_dot_dirs(2000)), 413, "entries"),
    ("not an archive", b"this is not a tar file at all" * 10, 400, "not a tar"),
    ("empty", b"", 400, "tar"),
]


@pytest.mark.parametrize("what,body,status,msg", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bundles(svc, what, body, status, msg):
    before = sorted(os.listdir(svc.state / "skills"))
    code = {400: "bad_request", 413: "payload_too_large"}[status]
    st, _, err = svc.request("POST", "/v1/skills", body=body, headers={"Content-Type": "application/gzip"})
    assert_error(st, err, code, status)
    assert msg in err["error"]["message"], err
    # nothing stored, nothing left half-unpacked, nothing written outside
    assert sorted(os.listdir(svc.state / "skills")) == before
    assert not Path("/tmp/airlock-skill-abs").exists() and not (svc.state / "escaped.py").exists()
    assert "bad" not in {s["name"] for s in svc.ok("GET", "/v1/skills")["skills"]}


def test_body_over_the_cap_is_413(svc):
    st, _, err = svc.request("POST", "/v1/skills", body=os.urandom(9 << 20))
    assert_error(st, err, "payload_too_large", 413)


def test_stored_bundle_is_normalised(svc):
    """Stored under its digest, root's, modes normalised (0755 directories,
    0644 files): the box's user reads it through the read-only bind."""
    name = f"norm-{time.monotonic_ns() % 10**9}"
    doc = upload(svc, hello_bundle(name=name))
    d = svc.state / "skills" / ("sha256-" + doc["digest"][7:])
    assert d.is_dir()
    for p in [d, *d.rglob("*")]:
        st = p.lstat()
        assert st.st_uid == 0
        assert (st.st_mode & 0o7777) == (0o755 if p.is_dir() else 0o644), (p, oct(st.st_mode))
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*")) == ["count.sh", "lib", "lib/greet.py", "skill.json"]
    # the digest is of the files, not of the archive: a plain tar of them is the same version
    plain = upload(svc, hello_bundle(name=name, gz=False), want=200)
    assert plain["digest"] == doc["digest"]


def test_approval_card_names_the_skill_and_arguments(svc):
    """Under approval_policy "always" a skill's run waits for a person like
    any run, and what is approved (and hashed) is the skill's digest, its
    entrypoint and the arguments."""
    from service_util import gov_tenant
    t = gov_tenant(svc, "skp")
    _, approver = t.person_in("approver")   # the requester does not decide its own run
    name = f"appr-{time.monotonic_ns() % 10**9}"
    digest = upload(t.client, hello_bundle(name=name))["digest"]
    t.client.ok("POST", f"/v1/skills/{name}/promote")
    put_settings(t.client, approval_policy="always")
    status, _, run = t.client.request("POST", f"/v1/skills/{name}/run",
                                      json={"entrypoint": "greet", "args": {"who": "eve", "times": 3}})
    assert status == 201 and run["state"] == "pending_approval", run
    card = run["approval"]
    what = json.loads(card["code"])
    assert what == {"skill": name, "version": "1.0.0", "digest": digest, "entrypoint": "greet",
                    "args": {"who": "eve", "times": 3}}, what
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    done = t.client.wait_state(run["id"], {"succeeded", "failed", "error"}, timeout=60)
    assert done["state"] == "succeeded" and done["result"]["stdout"].startswith("hello eve hello eve hello eve"), done


def test_a_broken_bundled_skill_stops_the_start(tmp_path):
    """Bundled skills ship with airlock: one that does not validate is an
    operator's error to hear about at start, not a skill that silently
    goes missing."""
    from service_util import service_binary
    bad = tmp_path / "skills" / "broken"
    bad.mkdir(parents=True)
    (bad / "skill.json").write_text(_manifest(name="broken"))      # its script e.py is missing
    (tmp_path / "skills" / "README.md").write_text("not a skill\n")
    cfg = tmp_path / "serve.conf"
    cfg.write_text(f"skills_dir = {tmp_path / 'skills'}\n")
    import subprocess
    p = subprocess.run([str(service_binary()), "serve", "--listen", "127.0.0.1:1", "--state", str(tmp_path / "state"),
                        "--config", str(cfg)], capture_output=True, timeout=60)
    assert p.returncode != 0
    err = p.stderr.decode(errors="replace")
    assert "bundled skill" in err and "broken" in err and "not a file of the bundle" in err, err
