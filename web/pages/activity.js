// Activity (#/activity, the default): the workspace's runs, live. Lists
// with GET /v1/runs, then applies each run entry of the workspace's stream
// (GET /v1/events, through ctx.live) by id, so a new run appears and a
// state changes without a reload.
import { h, badge, fmtAgo, fmtTime, runDuration, VIA_LABEL, shortId, describe, who, whoText, keyLabel } from "../dom.js";
import { startSnippets } from "../snippets.js";

const STATES = ["pending_approval", "queued", "provisioning", "running", "succeeded", "failed",
  "timed_out", "killed", "canceled", "denied", "error"];
const PAGE = 50;

function matches(run, f) {
  if (f.state && run.state !== f.state) return false;
  if (f.thread_id && run.thread_id !== f.thread_id) return false;
  if (f.person_id && (!run.requested_by || run.requested_by.id !== f.person_id)) return false;
  if (f.via && run.via !== f.via) return false;
  if (f.key_id && !(run.requested_by && run.requested_by.key && run.requested_by.key.id === f.key_id)) return false;
  return true;
}

function row(run) {
  const r = run.result || {};
  const exit = r.exit_code ?? (r.signal ? `signal ${r.signal}` : null);
  // the labels are shown before a cell's value at phone width, where each
  // run is a card (app.css, table.runs) rather than a row of 10 columns
  return h("tr", { "data-run": run.id },
    h("td", { class: "run-id" }, h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono", title: run.id }, shortId(run.id))),
    h("td", { class: "nowrap run-when", title: fmtTime(run.created_at) }, fmtAgo(run.created_at)),
    h("td", { class: "clip run-who", title: whoText(run.requested_by) }, who(run.requested_by)),
    h("td", { class: "nowrap run-via" }, run.via ? h("span", { class: "tag" }, VIA_LABEL[run.via] || run.via) : null,
      run.via ? " " : null, run.language || "—"),
    h("td", { class: "desc", title: run.description || "" }, describe(run.description) || h("span", { class: "muted" }, "no description")),
    h("td", { class: "run-state" }, badge(run.state)),
    h("td", { class: run.started_at ? "num dur" : "num dur none", "data-label": "took" }, runDuration(run)),
    h("td", { class: exit == null ? "num none" : "num", "data-label": "exit" }, exit ?? "—"),
    h("td", { class: "num", "data-label": "credits" }, run.credits ?? "—"),
    h("td", { class: run.thread_id ? "clip run-thread" : "clip run-thread none" }, run.thread_id ? h("a", { href: `#/threads/${encodeURIComponent(run.thread_id)}`, class: "mono", title: run.thread_id }, run.thread_id) : "—"));
}

export default {
  path: "#/activity",
  title: "Activity",
  nav: true,
  roles: null,
  async render(root, ctx) {
    const { api, live } = ctx;
    const f = { state: ctx.query.get("state") || "", thread_id: ctx.query.get("thread") || "",
      person_id: ctx.query.get("person") || "", via: ctx.query.get("via") || "",
      key_id: ctx.query.get("key") || "" };
    const runs = new Map();   // id -> entry, as shown
    let cursor = null;

    const persons = await api.get("/v1/persons").then((d) => d.persons).catch(() => null);
    const tbody = h("tbody", {});
    const more = h("button", { type: "button", class: "btn", hidden: true, onclick: () => load(false) }, "Load older runs");
    const status = h("p", { class: "muted", role: "status" });
    const tableWrap = h("div", { class: "table-wrap", tabindex: "0" },
      h("table", { class: "runs" },
        h("caption", { class: "sr-only" }, "Runs of the workspace, newest first"),
        h("thead", {}, h("tr", {}, ["Run", "When", "Who", "Interface", "Description", "State",
          "Duration", "Exit", "Credits", "Thread"].map((t) =>
          h("th", { scope: "col", class: ["Duration", "Exit", "Credits"].includes(t) ? "num" : null }, t)))),
        tbody));
    const empty = h("div", { class: "empty-state", hidden: true });

    const select = (label, key, options) => h("label", { class: "field" }, label,
      h("select", { onchange: (e) => { f[key] = e.target.value; load(true); } },
        h("option", { value: "" }, "All"),
        options.map(([v, t]) => h("option", { value: v, selected: f[key] === v }, t))));
    const thread = h("input", { type: "search", value: f.thread_id, placeholder: "thread id", "aria-label": "Thread" });
    thread.addEventListener("change", () => { f.thread_id = thread.value.trim(); load(true); });
    // the key's id until a run of it says its name
    const keyName = h("code", { class: "key-name" }, shortId(f.key_id));
    const filters = h("form", { class: "filters", role: "search", "aria-label": "Filter runs",
      onsubmit: (e) => { e.preventDefault(); f.thread_id = thread.value.trim(); load(true); } },
      select("State", "state", STATES.map((s) => [s, s.replace(/_/g, " ")])),
      persons ? select("Person", "person_id", persons.map((p) => [p.id, p.name])) : null,
      select("Interface", "via", Object.entries(VIA_LABEL)),
      h("label", { class: "field" }, "Thread", thread),
      // a key is chosen from a run's Who (its name links here), not from a
      // list: shown while it filters, with the way back to every key
      f.key_id ? h("div", { class: "field" }, "Key",
        h("span", { class: "key-filter" }, keyName, " ",
          h("button", { type: "button", class: "btn", onclick: () => { f.key_id = ""; ctx.go("#/activity" + addressOf()); } },
            "Show every key"))) : null);

    root.append(
      h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Activity"),
        h("p", {}, `Every run of ${ctx.session.workspace ? ctx.session.workspace.name : "the workspace"}, as it happens.`))),
      filters, empty, tableWrap, h("div", { class: "actions" }, more, status));

    const filtered = () => !!(f.state || f.thread_id || f.person_id || f.via || f.key_id);
    function showEmpty() {
      const none = runs.size === 0;
      tableWrap.hidden = none;
      empty.hidden = !none;
      status.hidden = none;   // "0 runs shown" under "No runs yet" says nothing more
      if (!none) return;
      empty.replaceChildren(...(filtered()
        ? [h("h2", {}, "No runs match these filters"), h("p", {}, "Clear a filter to see more of the workspace's runs.")]
        : [h("h2", {}, "No runs yet"), h("p", {}, "Runs appear here the moment an agent asks for one. Connect an agent to this service:"),
          ...startSnippets()]));
    }

    // the filters live in the address (#/activity?state=...&person=...), so a
    // reload or a shared link shows the same runs; replaceState fires no
    // hashchange, so the page is not drawn again
    function addressOf() {
      const q = new URLSearchParams();
      if (f.state) q.set("state", f.state);
      if (f.person_id) q.set("person", f.person_id);
      if (f.via) q.set("via", f.via);
      if (f.thread_id) q.set("thread", f.thread_id);
      if (f.key_id) q.set("key", f.key_id);
      return q.toString() ? `?${q}` : "";
    }
    function remember() {
      const hash = `#/activity${addressOf()}`;
      if (location.hash !== hash) history.replaceState(null, "", hash);
    }

    async function load(reset) {
      if (reset) { runs.clear(); tbody.replaceChildren(); cursor = null; remember(); }
      const q = new URLSearchParams({ limit: String(PAGE) });
      for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
      if (cursor) q.set("cursor", cursor);
      let doc;
      try {
        doc = await api.get(`/v1/runs?${q}`);
      } catch (e) {
        status.textContent = "";
        tbody.replaceChildren();
        ctx.toast(e.message, "error");
        return;
      }
      if (!ctx.current()) return;
      for (const run of doc.runs) {
        if (runs.has(run.id)) continue;
        runs.set(run.id, run);
        tbody.append(row(run));
      }
      const ofKey = f.key_id && doc.runs.find((r) => r.requested_by && r.requested_by.key);
      if (ofKey) keyName.replaceChildren(h("span", {}, keyLabel(ofKey.requested_by.key)));
      cursor = doc.next_cursor;
      more.hidden = !cursor;
      status.textContent = `${runs.size} run${runs.size === 1 ? "" : "s"} shown`;
      showEmpty();
    }

    // a run created or changed anywhere in the workspace (null: the stream
    // came back after a drop, so list again)
    const off = live((run) => {
      if (!run) { load(true); return; }
      const el = tbody.querySelector(`tr[data-run="${CSS.escape(run.id)}"]`);
      if (!matches(run, f)) {
        if (el) { el.remove(); runs.delete(run.id); showEmpty(); }
        return;
      }
      const next = row(run);
      next.classList.add("flash");
      if (el) el.replaceWith(next);
      else tbody.prepend(next);
      runs.set(run.id, run);
      status.textContent = `${runs.size} run${runs.size === 1 ? "" : "s"} shown`;
      showEmpty();
    });
    // durations of running runs tick
    const tick = setInterval(() => {
      for (const run of runs.values()) {
        if (run.state !== "running") continue;
        const el = tbody.querySelector(`tr[data-run="${CSS.escape(run.id)}"] td.dur`);
        if (el) el.textContent = runDuration(run);
      }
    }, 1000);
    await load(true);
    return () => { off(); clearInterval(tick); };
  },
};
