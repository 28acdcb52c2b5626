"""calendar-scheduler: events as an RFC 5545 iCalendar file (see skill.json).
The standard library only: the format is small and its rules are exact."""
import datetime as dt
import hashlib
import json
import re
import sys

PRODID = "-//airlock//calendar-scheduler 1.0.0//EN"


def escape(text):
    """TEXT values (RFC 5545 3.3.11): backslash, semicolon, comma, newline."""
    return (text.replace("\\", "\\\\").replace(";", "\\;").replace(",", "\\,")
            .replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n"))


def fold(line):
    """Content lines are at most 75 octets; longer ones continue on lines
    that start with a space (3.1), never splitting a UTF-8 character."""
    data = line.encode("utf-8")
    out, limit = [], 75
    while len(data) > limit:
        cut = limit
        while cut > 0 and (data[cut] & 0xC0) == 0x80:
            cut -= 1
        out.append(data[:cut])
        data = data[cut:]
        limit = 74  # the leading space counts
    out.append(data)
    return b"\r\n ".join(out) + b"\r\n"


def parse_time(value, what):
    """(kind, value): ("date", date), ("utc", datetime in UTC) or ("floating", naive datetime)."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            return "date", dt.date.fromisoformat(value)
        except ValueError as e:
            sys.exit(f"{what}: {value!r} is not a date: {e}")
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        sys.exit(f"{what}: {value!r} is not an ISO 8601 time such as 2025-03-04T09:00:00+01:00")
    if t.tzinfo is None:
        return "floating", t.replace(microsecond=0)
    return "utc", t.astimezone(dt.timezone.utc).replace(microsecond=0, tzinfo=None)


def fmt(kind, v):
    if kind == "date":
        return ";VALUE=DATE:" + v.strftime("%Y%m%d")
    return ":" + v.strftime("%Y%m%dT%H%M%S") + ("Z" if kind == "utc" else "")


def main():
    args = json.load(open(sys.argv[1]))
    out_name = args.get("output", "calendar.ics")
    if "/" in out_name or not out_name.endswith(".ics"):
        sys.exit(f"output must be a plain file name ending in .ics, not {out_name!r}")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:" + PRODID, "CALSCALE:GREGORIAN", "METHOD:PUBLISH"]
    if args.get("calendar_name"):
        lines.append("X-WR-CALNAME:" + escape(args["calendar_name"]))
    spans = []
    for i, ev in enumerate(args["events"]):
        what = f"events[{i}]"
        sk, start = parse_time(ev["start"], what + ".start")
        if "end" in ev:
            ek, end = parse_time(ev["end"], what + ".end")
            if ek != sk:
                sys.exit(f"{what}: start and end must both be dates, both have an offset, or both have none")
        elif sk == "date":
            ek, end = "date", start + dt.timedelta(days=max(1, ev.get("duration_minutes", 1440) // 1440))
        else:
            ek, end = sk, start + dt.timedelta(minutes=ev.get("duration_minutes", 60))
        if end <= start:
            sys.exit(f"{what}: it ends ({ev.get('end')}) before it starts ({ev['start']})")
        uid = ev.get("uid") or hashlib.sha256(
            json.dumps([ev["summary"], ev["start"], ev.get("end"), i], sort_keys=True).encode()).hexdigest()[:32] + "@airlock"
        lines += ["BEGIN:VEVENT", "UID:" + escape(uid), "DTSTAMP:" + stamp, "DTSTART" + fmt(sk, start),
                  "DTEND" + fmt(ek, end), "SUMMARY:" + escape(ev["summary"])]
        if ev.get("location"):
            lines.append("LOCATION:" + escape(ev["location"]))
        if ev.get("description"):
            lines.append("DESCRIPTION:" + escape(ev["description"]))
        for a in ev.get("attendees", []):
            if not re.fullmatch(r"[^@\s\"]+@[^@\s\"]+", a):
                sys.exit(f"{what}.attendees: {a!r} is not an email address")
            lines.append("ATTENDEE;ROLE=REQ-PARTICIPANT:mailto:" + a)
        lines.append("END:VEVENT")
        if sk != "date":
            spans.append((start, end, i, sk))
    lines.append("END:VCALENDAR")
    with open("/out/" + out_name, "wb") as f:
        f.write(b"".join(fold(l) for l in lines))
    overlaps = []
    spans.sort()
    for a in range(len(spans)):
        for b in range(a + 1, len(spans)):
            if spans[b][0] >= spans[a][1]:
                break
            if spans[a][3] == spans[b][3]:
                overlaps.append([spans[a][2], spans[b][2]])
    print(json.dumps({"output": out_name, "events": len(args["events"]), "overlaps": overlaps}))


if __name__ == "__main__":
    main()
