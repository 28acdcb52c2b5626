// A thread (#/threads/ID): its packages (the thread's environment: each
// package asked, the version its layer holds, the layer), its Artifacts tab
// (every path with its versions, who made each, download, previews) and its
// runs in order.
import { h, badge, fmtTime, runDuration, shortId, describe } from "../dom.js";
import { artifactsTable } from "../parts.js";

// The thread's environment: every spec its runs asked (pip's, npm's), the
// version the layer holds where the installer said, and the layer itself.
function packagesSection(pkgs) {
  const rows = [];
  for (const lang of ["python", "node"]) {
    // a name as its registry compares it: Python's as PEP 503 has them
    // (Foo_Bar and foo-bar are one), npm's lower case
    const key = (n) => (lang === "python" ? String(n).toLowerCase().replace(/[-_.]+/g, "-") : String(n).toLowerCase());
    const resolved = new Map(((pkgs.resolved || {})[lang] || []).filter((p) => p && p.name != null).map((p) => [key(p.name), p]));
    for (const spec of pkgs[lang] || []) {
      const name = lang === "python" ? spec.split(/[[<>=~!]/)[0] : spec.replace(/(.)@.*$/, "$1");
      const got = resolved.get(key(name));
      rows.push(h("tr", { "data-package": spec }, h("td", {}, lang), h("td", { class: "mono" }, spec),
        h("td", { class: "mono" }, got && got.version ? String(got.version) : "—")));
    }
  }
  if (!rows.length) return h("section", { class: "thread-packages", "aria-label": "Packages" },
    h("p", { class: "muted" }, "No packages: a run of this thread that asks for packages installs them here, for every later run."));
  return h("section", { class: "thread-packages", "aria-label": "Packages" },
    h("h2", {}, "Packages"),
    h("p", { class: "muted" }, "Installed for every run of this thread, in layer ",
      h("span", { class: "mono", title: pkgs.layer || "" }, pkgs.layer ? pkgs.layer.slice(0, 19) + "…" : "(not installed yet)"), "."),
    h("div", { class: "table-wrap", tabindex: "0" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Language", "Asked", "Installed"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows))));
}

export default {
  path: "#/threads/{id}",
  title: "Thread",
  nav: false,
  roles: null,
  section: "#/threads",
  async render(root, ctx) {
    const { api, params } = ctx;
    const id = params.id;
    const enc = encodeURIComponent(id);
    const [arts, runs, pkgs] = await Promise.all([
      api.get(`/v1/threads/${enc}/artifacts?all=true`),
      api.get(`/v1/runs?thread_id=${enc}&limit=200`),
      api.get(`/v1/threads/${enc}/packages`),
    ]);
    if (!ctx.current()) return;
    document.title = `Thread ${id} · airlock`;
    const byRun = new Map(runs.runs.map((r) => [r.id, r]));
    const who = (a) => {
      const r = byRun.get(a.run_id);
      const name = r && r.requested_by ? r.requested_by.name : null;
      return h("span", {}, name ? `${name} · ` : "", h("a", { href: `#/runs/${encodeURIComponent(a.run_id)}`, class: "mono" }, shortId(a.run_id)));
    };
    // every path, its versions newest first
    const sorted = arts.artifacts.slice().sort((a, b) => a.path.localeCompare(b.path) || b.version - a.version);
    const paths = new Set(sorted.map((a) => a.path));

    const artifactsPanel = h("div", { id: "tab-artifacts", role: "tabpanel", "aria-labelledby": "tab-a" },
      sorted.length ? [h("p", { class: "muted" }, `${paths.size} path${paths.size === 1 ? "" : "s"}, ${sorted.length} version${sorted.length === 1 ? "" : "s"}.`),
        artifactsTable(api, sorted, { who })]
        : h("div", { class: "empty-state" }, h("p", {}, "No artifacts yet: files a run of this thread writes under /out appear here, each write a new version.")));
    const ordered = runs.runs.slice().reverse();
    const runsPanel = h("div", { id: "tab-runs", role: "tabpanel", "aria-labelledby": "tab-r", hidden: true },
      h("div", { class: "table-wrap", tabindex: "0" }, h("table", {},
        h("thead", {}, h("tr", {}, ["#", "Run", "Who", "Description", "State", "Duration", "Created"].map((t) => h("th", { scope: "col", class: t === "#" ? "num" : null }, t)))),
        h("tbody", {}, ordered.map((r, i) => h("tr", { "data-run": r.id },
          h("td", { class: "num" }, i + 1),
          h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.id)}`, class: "mono", title: r.id }, shortId(r.id))),
          h("td", {}, r.requested_by ? r.requested_by.name : "—"),
          h("td", { class: "desc", title: r.description || "" }, describe(r.description) || "—"),
          h("td", {}, badge(r.state)), h("td", { class: "num" }, runDuration(r)), h("td", {}, fmtTime(r.created_at))))))));
    const tabA = h("button", { id: "tab-a", role: "tab", type: "button", "aria-selected": "true", "aria-controls": "tab-artifacts" }, `Artifacts (${paths.size})`);
    const tabR = h("button", { id: "tab-r", role: "tab", type: "button", "aria-selected": "false", "aria-controls": "tab-runs", tabindex: "-1" }, `Runs (${runs.runs.length}${runs.next_cursor ? "+" : ""})`);
    const select = (a) => {
      tabA.setAttribute("aria-selected", String(a)); tabR.setAttribute("aria-selected", String(!a));
      tabA.tabIndex = a ? 0 : -1; tabR.tabIndex = a ? -1 : 0;
      artifactsPanel.hidden = !a; runsPanel.hidden = a;
    };
    tabA.addEventListener("click", () => select(true));
    tabR.addEventListener("click", () => select(false));
    const tabs = h("div", { class: "tabs", role: "tablist", "aria-label": "Thread" }, tabA, tabR);
    tabs.addEventListener("keydown", (e) => {
      if (e.key === "ArrowRight" || e.key === "ArrowLeft") { const a = tabA.getAttribute("aria-selected") !== "true"; select(a); (a ? tabA : tabR).focus(); }
    });
    root.append(h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Thread ", h("span", { class: "mono" }, id)),
      h("p", { class: "actions" }, h("a", { href: "#/threads" }, "All threads"),
        h("a", { href: `#/activity?thread=${enc}` }, "This thread's runs in Activity")))), packagesSection(pkgs), tabs,
    artifactsPanel, runsPanel);
  },
};
