// Small DOM helpers shared by the pages. Text is always set as text, never
// parsed as HTML: whatever a run, an agent or a tenant wrote is shown as
// it is and can never become markup; and its invisible characters are
// shown (reveal), so it cannot read other than it is.

const SVG = "http://www.w3.org/2000/svg";

// Characters that make text read other than it is, which whoever controls
// a run's code, output, names or paths can use against the person reading
// the console (an approver above all): bidi embeddings, overrides and
// isolates (Trojan Source, CVE-2021-42574: code that reads one way and runs
// another), zero-width and other invisible format characters, and C0/C1
// controls (terminal escapes, backspaces that a terminal would use to
// overwrite text). Tab, newline and carriage return are kept; ZWJ/ZWNJ too
// (they join emoji and Persian letters, and reorder nothing).
const HIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb]/g;

// How one such character is shown: a C0 control as its Control Picture
// (ESC as "␛"), DEL as "␡", anything else as "⟨U+202E⟩".
export function hiddenLabel(c) {
  const n = c.codePointAt(0);
  if (n < 0x20) return String.fromCodePoint(0x2400 + n);
  if (n === 0x7f) return "\u2421";
  return `\u27e8U+${n.toString(16).toUpperCase().padStart(4, "0")}\u27e9`;
}

// TEXT with every such character made visible.
export function reveal(text) {
  HIDDEN.lastIndex = 0;
  return HIDDEN.test(text) ? text.replace(HIDDEN, hiddenLabel) : text;
}

// How many such characters TEXT has, and whether any reorders it.
export function hiddenCount(text) {
  const all = text.match(HIDDEN) || [];
  return { count: all.length, bidi: all.some((c) => /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/.test(c)) };
}

// TEXT as nodes for a code or output view: its hidden characters as marked
// spans (a title names each), the rest as text.
export function revealNodes(text) {
  HIDDEN.lastIndex = 0;
  if (!HIDDEN.test(text)) return [document.createTextNode(text)];
  HIDDEN.lastIndex = 0;   // matchAll starts where test stopped
  const nodes = [];
  let last = 0;
  for (const m of text.matchAll(HIDDEN)) {
    if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
    const code = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    nodes.push(h("span", { class: "hidden-char", title: `Invisible character U+${code}` }, hiddenLabel(m[0])));
    last = m.index + m[0].length;
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}
const SVG_TAGS = new Set(["svg", "g", "path", "rect", "line", "circle", "polyline", "text", "title"]);

// h("a", {href: "#/runs/1", class: "x", onclick: fn}, "text", child, [more])
export function h(tag, attrs, ...children) {
  const el = SVG_TAGS.has(tag) ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value" && "value" in el) el.value = v;
    else if (k === "checked" || k === "disabled" || k === "selected") el[k] = !!v;
    // what a tooltip or a screen reader says is text a person reads too
    else if (k === "title" || k.startsWith("aria-")) el.setAttribute(k, v === true ? "" : reveal(String(v)));
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(reveal(String(c))));
  }
}

export function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }

// --- formatting ---------------------------------------------------------

export function fmtTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function fmtAgo(iso) {
  if (!iso) return "—";
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function fmtLeft(iso) {
  if (!iso) return "—";
  const s = Math.round((new Date(iso).getTime() - Date.now()) / 1000);
  if (s <= 0) return "expired";
  if (s < 60) return `${s} s left`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s left`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min left`;
}

export function fmtMs(ms) {
  if (ms === undefined || ms === null) return "—";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function fmtBytes(n) {
  if (n === undefined || n === null) return "—";
  if (n < 1024) return `${n} B`;
  if (n < 1048576) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1073741824) return `${(n / 1048576).toFixed(1)} MiB`;
  return `${(n / 1073741824).toFixed(2)} GiB`;
}

// a run's duration: from its start to its end (or now, while it runs)
export function runDuration(run) {
  if (run.result && typeof run.result.wall_ms === "number") return fmtMs(run.result.wall_ms);
  if (run.started_at) {
    const end = run.finished_at ? new Date(run.finished_at) : new Date();
    return fmtMs(end - new Date(run.started_at));
  }
  return "—";
}

const STATE_KIND = {
  succeeded: "ok", running: "live", provisioning: "live", queued: "wait", pending_approval: "warn",
  failed: "bad", timed_out: "bad", killed: "bad", error: "bad", denied: "bad", canceled: "muted",
  paused: "wait",
};

export function stateLabel(state) { return String(state || "unknown").replace(/_/g, " "); }

// a state as a coloured badge that says it in words too
export function badge(state, kind) {
  return h("span", { class: `badge badge-${kind || STATE_KIND[state] || "muted"}` }, stateLabel(state));
}

export const VIA_LABEL = { rest: "REST", mcp: "MCP", piston: "Piston", e2b: "E2B" };

// Who asked for a run (its requested_by): the person and, when one of
// their API keys asked (an agent, told apart by the key's name), the key
// in a muted style: "Max Member · ci-agent". ROLE adds the person's role.
// whoText is the same as one line, for a title or a label.
export function keyLabel(key) { return key.name || `key ${shortId(key.id)}`; }
export function whoText(by, role) {
  if (!by) return "—";
  const person = (by.name || "(person gone)") + (role && by.role ? ` (${by.role})` : "");
  return by.key ? `${person} · ${keyLabel(by.key)}` : person;
}
export function who(by, role) {
  if (!by) return "—";
  const person = (by.name || "(person gone)") + (role && by.role ? ` (${by.role})` : "");
  if (!by.key) return person;
  // the key's name leads to Activity's runs of that key (GET /v1/runs?key_id=)
  return h("span", { class: "who" }, person, " ",
    h("a", { class: "muted who-key", href: `#/activity?key=${encodeURIComponent(by.key.id)}`,
      title: `Runs asked with API key ${keyLabel(by.key)}` }, `· ${keyLabel(by.key)}`));
}

export function shortId(id) { return id && id.length > 12 ? id.slice(0, 10) + "…" : id || "—"; }

// An E2B command's run keeps its process config as its description
// ("e2b: {"cmd":...,"args":[...]}", read back by the E2B API): shown as the
// command line it ran; anything else as written
const quote = (a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);
export function describe(d) {
  const m = /^e2b: (\{[^]*\})$/.exec(d || "");
  if (m) {
    try {
      const c = JSON.parse(m[1]);
      if (typeof c.cmd === "string") return "E2B command: " + [c.cmd, ...(Array.isArray(c.args) ? c.args : [])].map(String).map(quote).join(" ");
    } catch { /* cut at the description's limit: shown as written */ }
  }
  return d;
}
