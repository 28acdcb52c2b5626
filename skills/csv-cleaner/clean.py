"""csv-cleaner: types, missing values and duplicates of a CSV file (see skill.json)."""
import json
import os
import sys

import pandas as pd

DEFAULT_MARKERS = ["NA", "N/A", "n/a", "null", "NULL", "None", "-", "?"]
TRUE = {"true", "yes", "y", "1", "t"}
FALSE = {"false", "no", "n", "0", "f"}
# pandas 2 parses a column in the one format it infers from its first value,
# so "2024-01-06 10:30" after "2024-01-05" became NaT and the column text;
# "ISO8601" (pandas 2 only) takes each value's own ISO 8601 form, as pandas
# 1 did without it
ISO8601 = {"format": "ISO8601"} if int(pd.__version__.split(".")[0]) >= 2 else {}


def work_path(rel):
    p = os.path.realpath(os.path.join("/work", rel))
    if p != "/work" and not p.startswith("/work/"):
        sys.exit(f"input must be a path under /work, not {rel!r}")
    if not os.path.isfile(p):
        sys.exit(f"no file {rel!r} under /work (artifacts of the thread are in documents/)")
    return p


def infer(col):
    """The column converted to its type, and the type's name; every
    non-missing value must convert, or the column stays text."""
    present = col.dropna()
    if present.empty:
        return col, "empty"
    low = present.str.lower()
    if low.isin(TRUE | FALSE).all() and not present.str.fullmatch(r"[01]").all():
        return col.str.lower().map(lambda v: None if pd.isna(v) else v in TRUE).astype("boolean"), "boolean"
    nums = pd.to_numeric(present.str.replace(",", "", regex=False), errors="coerce")
    if nums.notna().all():
        full = pd.to_numeric(col.str.replace(",", "", regex=False), errors="coerce")
        if (nums % 1 == 0).all():
            return full.astype("Int64"), "integer"
        return full.astype("float64"), "number"
    if present.str.fullmatch(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?").all():
        dates = pd.to_datetime(present, errors="coerce", **ISO8601)
        if dates.notna().all():
            return pd.to_datetime(col, errors="coerce", **ISO8601), "date"
    return col, "text"


def main():
    args = json.load(open(sys.argv[1]))
    markers = set(args.get("missing_markers", DEFAULT_MARKERS))
    out_name = args.get("output", "cleaned.csv")
    if "/" in out_name or not out_name.endswith(".csv"):
        sys.exit(f"output must be a plain file name ending in .csv, not {out_name!r}")
    raw = pd.read_csv(work_path(args["input"]), dtype=str, keep_default_na=False)
    report = {"input": args["input"], "rows_in": int(len(raw)), "columns": {}}
    df = raw.copy()
    df.columns = [str(c).strip() for c in df.columns]
    trimmed = 0
    for c in df.columns:
        s = df[c].str.strip()
        trimmed += int((s != df[c]).sum())
        df[c] = s.where(~s.isin(markers) & (s != ""), None)
    report["cells_trimmed"] = trimmed
    missing_before = {c: int(df[c].isna().sum()) for c in df.columns}
    types = {}
    for c in df.columns:
        df[c], types[c] = infer(df[c])
    dups = 0
    if args.get("drop_duplicates", True):
        before = len(df)
        df = df.drop_duplicates().reset_index(drop=True)
        dups = before - len(df)
    report["duplicates_removed"] = int(dups)
    mode = args.get("missing", "keep")
    filled = {}
    if mode == "drop_rows":
        before = len(df)
        df = df.dropna().reset_index(drop=True)
        report["rows_dropped_for_missing"] = int(before - len(df))
    elif mode == "fill":
        for c in df.columns:
            n = int(df[c].isna().sum())
            if not n:
                continue
            if types[c] in ("integer", "number"):
                value = df[c].median()
                if types[c] == "integer":
                    value = int(round(value))
            elif df[c].notna().any():
                value = df[c].mode().iloc[0]
            else:
                continue
            df[c] = df[c].fillna(value)
            filled[c] = {"count": n, "value": value.isoformat() if hasattr(value, "isoformat") else
                         (value.item() if hasattr(value, "item") else value)}
        report["filled"] = filled
    report["missing_handling"] = mode
    report["rows_out"] = int(len(df))
    for c in df.columns:
        report["columns"][c] = {"type": types[c], "missing_before": missing_before[c],
                                "missing_after": int(df[c].isna().sum())}
    for c in df.columns:
        if types[c] == "date":
            has_time = (df[c].dropna().dt.normalize() != df[c].dropna()).any()
            df[c] = df[c].dt.strftime("%Y-%m-%d %H:%M:%S" if has_time else "%Y-%m-%d")
    df.to_csv(os.path.join("/out", out_name), index=False)
    with open("/out/cleaning_report.json", "w") as f:
        json.dump(report, f, indent=2, default=str)
    lines = [f"# Cleaning report: {args['input']}", "",
             f"- rows in: {report['rows_in']}", f"- rows out: {report['rows_out']}",
             f"- duplicate rows removed: {report['duplicates_removed']}",
             f"- cells trimmed of spaces: {trimmed}", f"- missing values: {mode}"]
    if "rows_dropped_for_missing" in report:
        lines.append(f"- rows dropped for missing values: {report['rows_dropped_for_missing']}")
    lines += ["", "| column | type | missing before | missing after |", "|---|---|---|---|"]
    for c, info in report["columns"].items():
        lines.append(f"| {c} | {info['type']} | {info['missing_before']} | {info['missing_after']} |")
    if filled:
        lines += ["", "Filled:", ""] + [f"- {c}: {v['count']} with {v['value']}" for c, v in filled.items()]
    with open("/out/cleaning_report.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"output": out_name, "rows_in": report["rows_in"], "rows_out": report["rows_out"],
                      "duplicates_removed": report["duplicates_removed"],
                      "types": {c: i["type"] for c, i in report["columns"].items()}}))


if __name__ == "__main__":
    main()
