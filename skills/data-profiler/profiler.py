"""data-profiler: a CSV or XLSX table's profile as Markdown and JSON (see skill.json)."""
import json
import math
import os
import re
import sys

import pandas as pd


def work_path(rel):
    p = os.path.realpath(os.path.join("/work", rel))
    if p != "/work" and not p.startswith("/work/"):
        sys.exit(f"input must be a path under /work, not {rel!r}")
    if not os.path.isfile(p):
        sys.exit(f"no file {rel!r} under /work (artifacts of the thread are in documents/)")
    return p


def num(v):
    """A JSON-safe number (NaN becomes null)."""
    if v is None:
        return None
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return None
    return int(v) if v.is_integer() and abs(v) < 2**53 else round(v, 6)


def kind(s):
    if pd.api.types.is_bool_dtype(s):
        return "boolean"
    if pd.api.types.is_integer_dtype(s):
        return "integer"
    if pd.api.types.is_float_dtype(s):
        return "integer" if s.dropna().apply(float.is_integer).all() and s.notna().any() else "number"
    if pd.api.types.is_datetime64_any_dtype(s):
        return "datetime"
    return "text"


def main():
    args = json.load(open(sys.argv[1]))
    path = work_path(args["input"])
    name = args.get("name", "profile")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name) or name.startswith("."):
        sys.exit(f"name must be a plain file name without extension, not {name!r}")
    top = args.get("top", 5)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".csv":
        df = pd.read_csv(path)
        source = {"format": "csv"}
    elif ext in (".xlsx", ".xlsm"):
        book = pd.ExcelFile(path, engine="openpyxl")
        sheet = args.get("sheet", book.sheet_names[0])
        if sheet not in book.sheet_names:
            sys.exit(f"no sheet {sheet!r} (sheets: {', '.join(book.sheet_names)})")
        df = book.parse(sheet)
        source = {"format": "xlsx", "sheet": sheet, "sheets": book.sheet_names}
    else:
        sys.exit(f"input must be a .csv or .xlsx file, not {args['input']!r}")
    prof = {"input": args["input"], **source, "rows": int(len(df)), "columns": int(df.shape[1]),
            "duplicate_rows": int(df.duplicated().sum()), "fields": []}
    for c in df.columns:
        s = df[c]
        f = {"name": str(c), "type": kind(s), "missing": int(s.isna().sum()),
             "missing_pct": round(100.0 * s.isna().mean(), 2) if len(s) else 0.0,
             "distinct": int(s.nunique(dropna=True))}
        if f["type"] in ("integer", "number"):
            d = s.dropna().astype(float)
            f.update({"min": num(d.min()), "max": num(d.max()), "mean": num(d.mean()), "median": num(d.median()),
                      "std": num(d.std()) if len(d) > 1 else None, "sum": num(d.sum())})
        elif f["type"] == "datetime":
            d = s.dropna()
            f.update({"min": d.min().isoformat() if len(d) else None, "max": d.max().isoformat() if len(d) else None})
        else:
            vc = s.dropna().astype(str).value_counts().head(top)
            f["top"] = [{"value": k, "count": int(v)} for k, v in vc.items()]
        prof["fields"].append(f)
    with open(f"/out/{name}.json", "w") as fh:
        json.dump(prof, fh, indent=2)
    md = [f"# Profile of {args['input']}", ""]
    if source["format"] == "xlsx":
        md.append(f"Sheet **{source['sheet']}** of {len(source['sheets'])}.")
        md.append("")
    md += [f"- rows: {prof['rows']}", f"- columns: {prof['columns']}", f"- duplicate rows: {prof['duplicate_rows']}", "",
           "| column | type | missing | distinct | min | max | mean |", "|---|---|---|---|---|---|---|"]
    for f in prof["fields"]:
        cell = lambda k: "" if f.get(k) is None else str(f.get(k))  # noqa: E731
        md.append(f"| {f['name']} | {f['type']} | {f['missing']} ({f['missing_pct']}%) | {f['distinct']} | "
                  f"{cell('min')} | {cell('max')} | {cell('mean')} |")
    for f in prof["fields"]:
        if f.get("top"):
            md += ["", f"## {f['name']}: most common values", ""]
            md += [f"- {t['value']}: {t['count']}" for t in f["top"]]
    with open(f"/out/{name}.md", "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(json.dumps({"outputs": [f"{name}.md", f"{name}.json"], "rows": prof["rows"], "columns": prof["columns"]}))


if __name__ == "__main__":
    main()
