"""pdf-report: Markdown and images typeset into a PDF with reportlab (see skill.json).

reportlab rather than fpdf2 (both are in the default image): the layout here
is reportlab's platypus (paragraphs, lists, code blocks, images scaled to the
frame, tables split across pages with their header row repeated, numbered
pages), and it runs unchanged on reportlab 4.3; fpdf2 could do most of it,
but as a rewrite that would produce nothing new, and reportlab is in the
bookworm image too (fpdf2 is not), so the skill runs on either image."""
import json
import os
import re
import sys
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, letter
from reportlab.lib.styles import getSampleStyleSheet, ParagraphStyle
from reportlab.lib.units import mm
from reportlab.platypus import (Image, ListFlowable, ListItem, PageBreak, Paragraph, Preformatted,
                                SimpleDocTemplate, Spacer, Table, TableStyle)

STYLES = getSampleStyleSheet()
CODE = ParagraphStyle("code", parent=STYLES["Code"], fontSize=8.5, leading=10.5, backColor=colors.whitesmoke)
CAPTION = ParagraphStyle("caption", parent=STYLES["Italic"], fontSize=9, alignment=1)


def inside_work(path):
    p = os.path.realpath(path)
    return p if p == "/work" or p.startswith("/work/") else None


def inline(text):
    """Markdown emphasis and code spans as reportlab's mini-markup."""
    t = escape(text)
    t = re.sub(r"`([^`]+)`", r'<font face="Courier">\1</font>', t)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    t = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", t)
    t = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<link href="\2" color="blue">\1</link>', t)
    return t


def image(path, caption, base, width):
    cands = [os.path.join(base, path), os.path.join("/work", path)]
    for c in cands:
        p = inside_work(c)
        if p and os.path.isfile(p):
            img = Image(p)
            scale = min(1.0, width / img.imageWidth)
            img.drawWidth, img.drawHeight = img.imageWidth * scale, img.imageHeight * scale
            out = [img]
            if caption:
                out.append(Paragraph(inline(caption), CAPTION))
            return out
    sys.exit(f"image {path!r} not found under /work (artifacts of the thread are in documents/)")


def table(rows):
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    cells = [r for r in cells if not all(re.fullmatch(r":?-{3,}:?", c) for c in r)]
    data = [[Paragraph(inline(c), STYLES["BodyText"]) for c in r] for r in cells]
    t = Table(data, repeatRows=1)
    t.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.4, colors.grey),
                           ("BACKGROUND", (0, 0), (-1, 0), colors.lightgrey),
                           ("VALIGN", (0, 0), (-1, -1), "TOP")]))
    return t


def flow(md, base, width):
    out, para, lines, i = [], [], md.splitlines(), 0

    def end_para():
        if para:
            out.append(Paragraph(inline(" ".join(para)), STYLES["BodyText"]))
            para.clear()

    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if s.startswith("```"):
            end_para()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            out.append(Preformatted("\n".join(lines[i + 1:j]), CODE))
            i = j + 1
            continue
        if s in ("<!-- pagebreak -->", "\\pagebreak"):
            end_para()
            out.append(PageBreak())
        elif not s:
            end_para()
        elif m := re.fullmatch(r"(#{1,6})\s+(.*)", s):
            end_para()
            out.append(Paragraph(inline(m.group(2)), STYLES["Heading%d" % min(len(m.group(1)), 4)]))
        elif m := re.fullmatch(r"!\[([^\]]*)\]\(([^)\s]+)\)", s):
            end_para()
            out += image(m.group(2), m.group(1), base, width)
        elif s.startswith("|"):
            end_para()
            j = i
            while j < len(lines) and lines[j].strip().startswith("|"):
                j += 1
            out.append(table(lines[i:j]))
            out.append(Spacer(1, 4 * mm))
            i = j
            continue
        elif re.match(r"([-*+]|\d+[.)])\s+", s):
            end_para()
            ordered = bool(re.match(r"\d", s))
            items, j = [], i
            while j < len(lines) and re.match(r"\s*([-*+]|\d+[.)])\s+", lines[j]):
                items.append(re.sub(r"^\s*([-*+]|\d+[.)])\s+", "", lines[j]))
                j += 1
            out.append(ListFlowable([ListItem(Paragraph(inline(t), STYLES["BodyText"])) for t in items],
                                    bulletType="1" if ordered else "bullet"))
            i = j
            continue
        else:
            para.append(s)
        i += 1
    end_para()
    return out


def main():
    args = json.load(open(sys.argv[1]))
    if ("markdown" in args) == ("input" in args):
        sys.exit("give the report's text as markdown or as input (a file under /work), one of the two")
    base = "/work"
    if "input" in args:
        p = inside_work(os.path.join("/work", args["input"]))
        if not p or not os.path.isfile(p):
            sys.exit(f"no file {args['input']!r} under /work (artifacts of the thread are in documents/)")
        md = open(p, encoding="utf-8").read()
        base = os.path.dirname(p)
    else:
        md = args["markdown"]
    out_name = args.get("output", "report.pdf")
    if "/" in out_name or not out_name.endswith(".pdf"):
        sys.exit(f"output must be a plain file name ending in .pdf, not {out_name!r}")
    size = letter if args.get("page_size") == "letter" else A4
    doc = SimpleDocTemplate("/out/" + out_name, pagesize=size, leftMargin=20 * mm, rightMargin=20 * mm,
                            topMargin=20 * mm, bottomMargin=20 * mm, title=args.get("title", ""),
                            author=args.get("author", ""), creator="airlock pdf-report")
    story = []
    if args.get("title"):
        story += [Paragraph(inline(args["title"]), STYLES["Title"]), Spacer(1, 4 * mm)]
    story += flow(md, base, doc.width)
    pages = []

    def count(canvas, _doc):
        pages.append(canvas.getPageNumber())
        canvas.setFont("Helvetica", 8)
        canvas.drawRightString(size[0] - 20 * mm, 10 * mm, str(canvas.getPageNumber()))

    doc.build(story, onFirstPage=count, onLaterPages=count)
    print(json.dumps({"output": out_name, "pages": len(pages)}))


if __name__ == "__main__":
    main()
