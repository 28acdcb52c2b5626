"""chart-builder: a CSV file's columns as a PNG chart (see skill.json)."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

DPI = 100


def work_path(rel):
    """A path the caller names, kept inside /work."""
    p = os.path.realpath(os.path.join("/work", rel))
    if p != "/work" and not p.startswith("/work/"):
        sys.exit(f"input must be a path under /work, not {rel!r}")
    if not os.path.isfile(p):
        sys.exit(f"no file {rel!r} under /work (artifacts of the thread are in documents/)")
    return p


def out_name(name, ext):
    if "/" in name or name in ("", ".", "..") or not name.endswith(ext):
        sys.exit(f"output must be a plain file name ending in {ext}, not {name!r}")
    return os.path.join("/out", name)


def main():
    args = json.load(open(sys.argv[1]))
    df = pd.read_csv(work_path(args["input"]))
    x = args["x"]
    if x not in df.columns:
        sys.exit(f"no column {x!r} in {args['input']} (columns: {', '.join(map(str, df.columns))})")
    ys = args.get("y") or [c for c in df.columns if c != x and pd.api.types.is_numeric_dtype(df[c])]
    missing = [c for c in ys if c not in df.columns]
    if missing:
        sys.exit(f"no column {missing[0]!r} in {args['input']} (columns: {', '.join(map(str, df.columns))})")
    if not ys:
        sys.exit("no numeric column to plot: name the columns in y")
    for c in ys:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    kind = args.get("kind", "line")
    w, h = args.get("width", 800), args.get("height", 500)
    fig, ax = plt.subplots(figsize=(w / DPI, h / DPI), dpi=DPI)
    if kind == "scatter":
        for c in ys:
            ax.scatter(df[x], df[c], label=c)
    else:
        df.plot(x=x, y=ys, kind=kind, ax=ax, stacked=False)
    ax.set_title(args.get("title", ""))
    ax.set_xlabel(args.get("x_label", x))
    if "y_label" in args:
        ax.set_ylabel(args["y_label"])
    if len(ys) > 1 or kind == "scatter":
        ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    out = out_name(args.get("output", "chart.png"), ".png")
    fig.savefig(out, dpi=DPI)
    print(json.dumps({"output": os.path.basename(out), "rows": int(len(df)), "series": ys, "kind": kind,
                      "size": [w, h]}))


if __name__ == "__main__":
    main()
