// Shared pieces of the admin pages (Settings, Usage, Audit, Skills, Keys):
// badge words, dates, tables, and the inline SVG bar chart. Not a page, so
// web/pages/index.js does not list it.

// The enforcement levels of docs/security.md in the words the console shows.
const LEVELS = {
  "boundary": { word: "Boundary", cls: "ok" },
  "boundary-conditional": { word: "Boundary — conditional", cls: "live" },
  "applied": { word: "Applied — not a full boundary", cls: "warn" },
  "unconfirmed": { word: "Unconfirmed", cls: "muted" },
  "not-enforced": { word: "Not enforced", cls: "bad" },
};

export function levelWord(level) {
  return (LEVELS[level] || LEVELS["not-enforced"]).word;
}

// A badge: the level in words, and beside it the condition or gap (detail).
export function badge(h, b) {
  const l = LEVELS[b && b.level] || LEVELS["not-enforced"];
  return h("span", { class: "badge badge-" + l.cls }, l.word);
}

export function when(t) {
  if (!t) return "—";
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  return d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit" });
}

// A table with headers (th scope=col) and ROWS of cells (strings or nodes).
export function table(h, caption, heads, rows, cls) {
  // a region the keyboard can scroll, when a narrow screen makes it scroll
  return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption || heads.join(", ") },
    h("table", { class: "adm-table " + (cls || "") },
      caption ? h("caption", { class: "adm-caption" }, caption) : null,
      h("thead", {}, h("tr", {}, ...heads.map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c)))))));
}

// A section card with a heading.
export function card(h, title, ...children) {
  return h("section", { class: "card", "aria-label": title }, h("h2", {}, title), ...children);
}

// The words of an API error (api.* throw an Error whose message is the API's).
export function errWords(e) {
  return (e && e.message) || String(e);
}

export function errStatus(e) {
  return e && (e.status || (e.response && e.response.status)) || 0;
}

const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) if (k != null) el.append(k);
  return el;
}

// Stable colours per series name (state, language, interface): classes in
// app.css, so no inline style (the CSP forbids it).
const PALETTE = 8;
export function seriesClass(names, name) {
  return "adm-s" + (names.indexOf(name) % PALETTE);
}

// A stacked bar chart of DAYS ([{date, counts: {series: n}}]) as inline SVG,
// with its text alternative: an aria-label summary on the figure and the
// numbers themselves as a table beneath (always in the DOM, so screen
// readers and the tests read the same figures the bars draw).
export function stackedChart(h, title, days, seriesNames) {
  const W = 560, H = 200, padL = 30, padR = 8, padB = 22, padT = 8;
  const totals = days.map((d) => seriesNames.reduce((s, n) => s + (d.counts[n] || 0), 0));
  const max = Math.max(1, ...totals);
  const bw = (W - padL - padR) / Math.max(1, days.length);
  const g = svg("g", {});
  // gridlines and the axis labels
  // whole-number ticks, each drawn where its value is
  for (const v of [...new Set([0, Math.round(max / 2), max])]) {
    const y = padT + (H - padT - padB) * (1 - v / max);
    g.append(svg("line", { x1: padL, x2: W - padR, y1: y, y2: y, class: "adm-grid" }));
    g.append(svg("text", { x: padL - 4, y: y + 4, "text-anchor": "end", class: "adm-axis" }, String(v)));
  }
  days.forEach((d, i) => {
    let y = H - padB;
    for (const n of seriesNames) {
      const v = d.counts[n] || 0;
      if (!v) continue;
      const bh = (H - padT - padB) * v / max;
      y -= bh;
      const r = svg("rect", { x: padL + i * bw + 1, y, width: Math.max(1, bw - 2), height: bh,
        class: seriesClass(seriesNames, n) });
      r.append(svg("title", {}, `${d.date}: ${v} ${n}`));
      g.append(r);
    }
    // a date under every seventh bar, counted back from the last (today), which ends flush right
    const back = days.length - 1 - i;
    if (back % 7 === 0)
      g.append(svg("text", { x: back === 0 ? W - padR : padL + i * bw + bw / 2, y: H - 6,
        "text-anchor": back === 0 ? "end" : "middle", class: "adm-axis" }, d.date.slice(5)));
  });
  const total = totals.reduce((a, b) => a + b, 0);
  const sums = seriesNames.map((n) => [n, days.reduce((s, d) => s + (d.counts[n] || 0), 0)]).filter((x) => x[1]);
  const summary = `${title}: ${total} in the last ${days.length} days` +
    (sums.length ? " (" + sums.map(([n, v]) => `${n} ${v}`).join(", ") + ")" : "") + ".";
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "adm-chart", role: "img", "aria-label": summary }, g);
  const legend = h("ul", { class: "adm-legend", "aria-hidden": "true" },
    ...seriesNames.map((n) => h("li", {}, h("span", { class: "adm-swatch " + seriesClass(seriesNames, n) }), n)));
  const rows = days.filter((d, i) => totals[i] > 0).map((d) => [d.date, ...seriesNames.map((n) => String(d.counts[n] || 0))]);
  const alt = h("details", { class: "adm-alt" }, h("summary", {}, `${title}: the numbers`),
    rows.length ? table(h, null, ["Day", ...seriesNames], rows) : h("p", {}, "No runs in these days."));
  return h("figure", { class: "adm-figure" }, h("figcaption", {}, title), chart, legend,
    h("p", { class: "adm-chart-summary" }, summary), alt);
}
