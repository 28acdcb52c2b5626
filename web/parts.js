// Pieces several pages show: a run's input manifest, its artifacts with
// their previews, the driver's control badges, a run's audit events.
import { h, fmtBytes, fmtMs, fmtTime, badge } from "./dom.js";

const short = (hash) => (hash ? hash.slice(0, 12) + "…" : "—");

export function hashCell(hash) {
  return h("td", { class: "mono", title: hash || "" }, short(hash));
}

// What the box holds beside its code (an approval card's inputs, or what a
// trace kept): files, stdin, args, documents and connected folders' files,
// with sizes and hashes.
export function manifest(inputs, extraArtifacts, imports) {
  const rows = [];
  const i = inputs || {};
  for (const f of i.files || []) rows.push(["File", f.name, f.size, f.sha256, f.url]);
  if (i.stdin) rows.push(["Stdin", "standard input", i.stdin.size, i.stdin.sha256, i.stdin.url]);
  for (const d of i.documents || []) rows.push(["Document", `${d.path} (v${d.version})`, d.size, d.sha256, d.url]);
  if (!i.documents && extraArtifacts) for (const a of extraArtifacts) rows.push(["Document", a.path || a.id || a, a.size, a.sha256, null]);
  // a connected folder's files, as read at the request (staged in /work/documents/FOLDER)
  // (a run that needed no approval still lists its imports: the run object's `imports`)
  for (const f of i.imports || imports || []) rows.push(["Folder file", `${f.folder}: ${f.path}`, f.size, f.sha256, null]);
  const args = Array.isArray(i.args) && i.args.length ? i.args : null;
  const parts = [];
  if (args) parts.push(h("p", {}, h("strong", {}, "Arguments: "), h("code", {}, args.map((a) => JSON.stringify(a)).join(" "))));
  if (i.skill) parts.push(h("p", {}, h("strong", {}, "Skill: "), typeof i.skill === "string" ? i.skill : JSON.stringify(i.skill)));
  if (!rows.length) {
    // a run with no approval card keeps no manifest of its inputs (docs/api.md, Approvals)
    parts.push(h("p", { class: "muted" }, !inputs ? "This run needed no approval, so no manifest of its inputs was kept; the artifacts it was given would be listed here."
      : args ? "No files, stdin or documents." : "No inputs beside the code: no files, stdin, arguments or documents."));
    return parts;
  }
  parts.push(h("div", { class: "table-wrap", tabindex: "0" }, h("table", {},
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Kind"), h("th", { scope: "col" }, "Name"),
      h("th", { scope: "col", class: "num" }, "Size"), h("th", { scope: "col" }, "SHA-256"))),
    h("tbody", {}, rows.map(([kind, name, size, sha]) => h("tr", {},
      h("td", {}, kind), h("td", { class: "mono" }, name), h("td", { class: "num" }, fmtBytes(size)), hashCell(sha)))))));
  return parts;
}

// --- packages ----------------------------------------------------------------
// Every name, spec and version below came from an agent or from a registry:
// h() sets them as text (their invisible characters shown), never markup.

const LANGS = [["python", "Python"], ["node", "Node"]];
const specsOf = (set, lang) => (set && Array.isArray(set[lang]) ? set[lang] : []);

// Whether SET ({python, node}) names any package.
export function hasPackages(set) { return LANGS.some(([l]) => specsOf(set, l).length > 0); }

// What a run will install: an approval card's packages ({python, node: the
// thread's set with the run's over it, asked: what the run itself asked}),
// or a run's own `packages` (what it asked, as asked) when there is no card.
// A spec the run asked says so; the rest is its thread's already.
export function packagesPlanned(set, asked) {
  const own = asked || set.asked || set;
  const rows = [];
  for (const [lang, label] of LANGS) {
    const mine = new Set(specsOf(own, lang));
    for (const spec of specsOf(set, lang)) rows.push(h("tr", { "data-package": spec },
      h("td", { "data-label": "Language" }, label), h("td", { class: "mono", "data-label": "Package" }, spec),
      h("td", { "data-label": "From" }, mine.has(spec) ? "asked by this run" : "the thread's set")));
  }
  if (!rows.length) return h("p", { class: "muted" }, "No packages.");
  return h("div", { class: "table-wrap", tabindex: "0" }, h("table", { class: "stack packages" },
    h("caption", { class: "sr-only" }, "Packages to install"),
    h("thead", {}, h("tr", {}, ["Language", "Package", "From"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows)));
}

// What a run's install made or found (result.packages: layer, reused,
// install_ms, and each package as it resolved: name, version, and pip's
// sha256 or npm's integrity).
export function packagesInstalled(res) {
  const rows = [];
  for (const [lang, label] of LANGS) for (const p of specsOf(res, lang)) {
    const hash = p && (p.sha256 || p.integrity) ? String(p.sha256 || p.integrity) : null;
    rows.push(h("tr", { "data-installed": `${lang}:${p && p.name}` },
      h("td", { "data-label": "Language" }, label), h("td", { class: "mono", "data-label": "Name" }, p && p.name != null ? String(p.name) : "—"),
      h("td", { class: "mono", "data-label": "Version" }, p && p.version != null ? String(p.version) : "—"),
      h("td", { class: "mono", "data-label": "Hash", title: hash || "" }, short(hash))));
  }
  const layer = typeof res.layer === "string" ? res.layer : null;
  return [h("dl", { class: "kv" },
    h("dt", {}, "Layer"), h("dd", {}, layer ? h("code", { title: layer }, layer.slice(0, 19) + "…") : "—"),
    h("dt", {}, "Install"), h("dd", {}, res.reused ? "reused: a run installed this set before"
      : Number.isFinite(res.install_ms) ? `installed for this run in ${fmtMs(res.install_ms)}` : "installed for this run")),
  rows.length ? h("div", { class: "table-wrap", tabindex: "0" }, h("table", { class: "stack packages-installed" },
    h("caption", { class: "sr-only" }, "Installed packages"),
    h("thead", {}, h("tr", {}, ["Language", "Name", "Version", "Hash"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows))) : h("p", { class: "muted" }, "The installer reported no package.")];
}

// --- controls (the driver's badges) ------------------------------------

const LEVEL = {
  boundary: ["Boundary", "ok"], conditional: ["Boundary — conditional", "warn"],
  applied: ["Applied — not a full boundary", "warn"], unconfirmed: ["Unconfirmed", "muted"],
  not_enforced: ["Not enforced", "bad"], none: ["Not enforced", "bad"],
};

// {name: {level, detail}} (nested one deep: cgroup.memory) as rows
export function controlRows(controls) {
  const out = [];
  const walk = (obj, prefix) => {
    for (const [k, v] of Object.entries(obj || {})) {
      if (v && typeof v === "object" && typeof v.level === "string") out.push([prefix + k, v.level, v.detail || v.condition || v.gap || ""]);
      else if (v && typeof v === "object" && !Array.isArray(v)) walk(v, `${prefix}${k} `);
    }
  };
  walk(controls, "");
  return out;
}

export function controlsTable(controls) {
  const rows = controlRows(controls);
  if (!rows.length) return h("p", { class: "muted" }, "The driver reported no controls for this run.");
  // (stack: one card per control at phone width, its detail readable rather than a column 60 px wide)
  return h("div", { class: "table-wrap", tabindex: "0" }, h("table", { class: "stack" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Control"), h("th", { scope: "col" }, "Level"), h("th", { scope: "col" }, "Detail"))),
    h("tbody", {}, rows.map(([name, level, detail]) => {
      const [label, kind] = LEVEL[level] || [level.replace(/_/g, " "), "muted"];
      return h("tr", {}, h("td", { "data-label": "Control" }, name),
        h("td", { "data-label": "Level" }, h("span", { class: `badge badge-${kind}` }, label)), h("td", { "data-label": "Detail" }, detail));
    }))));
}

// --- artifacts and previews ----------------------------------------------

const CSV_ROWS = 50;

// a small CSV reader: quoted fields, doubled quotes; bounded rows
function parseCsv(text, max) {
  const rows = [];
  let row = [], field = "", q = false;
  for (let i = 0; i < text.length && rows.length <= max; i++) {
    const c = text[i];
    if (q) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; } else if (c === '"') q = false; else field += c;
    } else if (c === '"') q = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field); rows.push(row); row = []; field = "";
    } else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  return rows;
}

export function contentUrl(a) { return `/v1/artifacts/${encodeURIComponent(a.id)}/content`; }

// The file name a download is saved under: the artifact's own, less what
// could disguise it (a right-to-left override turns "report\u202Efdp.exe"
// into what reads as "reportexe.pdf"; controls and invisible characters).
export function downloadName(a) {
  const name = (a.path || a.id).split("/").pop().replace(/[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb]/g, "_");
  return name.slice(0, 200) || "artifact";
}

export function downloadLink(a) {
  const name = downloadName(a);
  return h("a", { class: "btn", href: contentUrl(a), download: name, "aria-label": `Download ${a.path || a.id}` }, "Download");
}

const TEXT_HEAD = 64 * 1024;   // what a text or CSV preview reads of a large file

function isCsv(a) { return (a.content_type || "").startsWith("text/csv") || (a.path || "").endsWith(".csv"); }
// text by its type, or by a name the service types application/octet-stream (a .log, a .jsonl);
// shown as text (never markup) either way, so a wrong guess shows odd characters, no more
const TEXT_NAMES = /\.(log|txt|md|jsonl|ndjson|ya?ml|toml|ini|cfg|conf|tsv|py|js|mjs|sh|sql|xml|html?)$/i;
function isText(a) { const t = a.content_type || ""; return t.startsWith("text/") || t.includes("json") || TEXT_NAMES.test(a.path || ""); }

// whether the console can show A (images, CSV as a table, text); else only its download
export function previewable(a) {
  return ((a.content_type || "").startsWith("image/") && a.size <= 10 * 1024 * 1024) || isCsv(a) || isText(a);
}

// A preview of artifact A (image, CSV, text), fetched with the session
// and shown from memory; CSV and text of any size from their first 64 KiB
// (the rest is never fetched); anything else: its download.
export async function preview(api, a) {
  const type = a.content_type || "";
  const box = h("div", { class: "preview" });
  try {
    if (type.startsWith("image/") && a.size <= 10 * 1024 * 1024) {
      const blob = await api.blob(contentUrl(a));
      // the blob's address is this origin's: an SVG opened from it ("open
      // image in new tab") would be a document of the console's origin, so
      // it lives only until the image has drawn
      const url = URL.createObjectURL(blob);
      const free = () => URL.revokeObjectURL(url);
      box.append(h("img", { class: "preview-img", src: url, alt: `Preview of ${a.path}`, onload: free, onerror: free }));
    } else if (isCsv(a) || isText(a)) {
      const { bytes, whole } = await api.head(contentUrl(a), TEXT_HEAD);
      let text = new TextDecoder().decode(bytes);
      // a cut file ends mid-line: that line is left out rather than shown broken
      if (!whole && text.lastIndexOf("\n") > 0) text = text.slice(0, text.lastIndexOf("\n") + 1);
      if (isCsv(a)) {
        const rows = parseCsv(text, CSV_ROWS + 1);
        const [head, ...body] = rows;
        box.append(h("div", { class: "table-wrap", tabindex: "0" }, h("table", {},
          h("caption", { class: "sr-only" }, `First rows of ${a.path}`),
          h("thead", {}, h("tr", {}, (head || []).map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, body.slice(0, CSV_ROWS).map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))))));
        if (body.length > CSV_ROWS || !whole) box.append(h("p", { class: "muted" }, `The first ${Math.min(body.length, CSV_ROWS)} rows of ${fmtBytes(a.size)}; download it for the rest.`));
      } else {
        box.append(h("pre", { class: "output", tabindex: "0", "aria-label": `Content of ${a.path}` }, text));
        if (!whole) box.append(h("p", { class: "muted" }, `The first ${fmtBytes(text.length)} of ${fmtBytes(a.size)}; download it for the whole file.`));
      }
    } else {
      box.append(h("p", { class: "muted" }, type === "application/pdf" ? "A PDF: download it to read it." : "No preview for this type: download it."));
    }
  } catch (e) {
    box.append(h("p", { class: "alert alert-error" }, e.message));
  }
  return box;
}

export function artifactsTable(api, artifacts, { who } = {}) {
  const tbody = h("tbody", {});
  for (const a of artifacts) {
    const previewRow = h("tr", { hidden: true, class: "preview-row" }, h("td", { colspan: who ? 7 : 6 }));
    let shown = false;
    const toggle = h("button", { type: "button", class: "btn btn-quiet", "aria-expanded": "false",
      "aria-label": `Preview ${a.path}`,
      onclick: async () => {
        const open = previewRow.hidden;
        previewRow.hidden = !open;
        toggle.setAttribute("aria-expanded", String(open));
        if (open && !shown) { shown = true; previewRow.firstChild.append(await preview(api, a)); }
      } }, "Preview");
    tbody.append(h("tr", { "data-artifact": a.id },
      h("td", { class: "mono", "data-label": "Path" }, a.path), h("td", { class: "num", "data-label": "Version" }, `v${a.version}`),
      h("td", { class: "num", "data-label": "Size" }, fmtBytes(a.size)), h("td", { class: "hide-narrow" }, a.content_type || "—"),
      who ? h("td", { "data-label": "Made by" }, who(a)) : null,
      h("td", { class: "hide-narrow" }, fmtTime(a.created_at)),
      h("td", {}, h("div", { class: "actions" }, previewable(a) ? toggle : h("span", { class: "muted no-preview" },
        a.content_type === "application/pdf" ? "PDF" : "No preview"), downloadLink(a)))), previewRow);
  }
  return h("div", { class: "table-wrap", tabindex: "0" }, h("table", { class: "stack" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Path"), h("th", { scope: "col", class: "num" }, "Version"),
      h("th", { scope: "col", class: "num" }, "Size"), h("th", { scope: "col", class: "hide-narrow" }, "Type"),
      who ? h("th", { scope: "col" }, "Made by") : null,
      h("th", { scope: "col", class: "hide-narrow" }, "Created"), h("th", { scope: "col" }, h("span", { class: "sr-only" }, "Actions")))),
    tbody));
}

// --- audit events ----------------------------------------------------------

function summary(data) {
  if (!data || typeof data !== "object") return "";
  const keep = Object.entries(data).filter(([, v]) => v !== null && typeof v !== "object").slice(0, 6);
  return keep.map(([k, v]) => `${k}: ${v}`).join(" · ");
}

export function auditTable(events, names) {
  if (!events.length) return h("p", { class: "muted" }, "No audit events.");
  return h("div", { class: "table-wrap", tabindex: "0" }, h("table", { class: "stack" },
    h("thead", {}, h("tr", {}, ["#", "Event", "Who", "When", "Detail"].map((t) => h("th", { scope: "col", class: t === "#" ? "num" : null }, t)))),
    h("tbody", {}, events.map((e) => h("tr", {},
      h("td", { class: "num", "data-label": "#" }, e.seq), h("td", { "data-label": "Event" }, h("code", {}, e.kind)),
      h("td", { "data-label": "Who" }, (names && names.get(e.person_id)) || e.person_id || "—"),
      h("td", { "data-label": "When" }, fmtTime(e.created_at)),
      h("td", { class: "desc", "data-label": "Detail", title: summary(e.data) }, summary(e.data)))))));
}

export { badge };
