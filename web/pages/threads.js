// Threads (#/threads): the workspace's threads, newest activity first
// (GET /v1/threads), each with its runs and artifacts counted.
import { h, fmtAgo, fmtTime } from "../dom.js";

export default {
  path: "#/threads",
  title: "Threads",
  nav: true,
  roles: null,
  async render(root, ctx) {
    const { api } = ctx;
    const tbody = h("tbody", {});
    const more = h("button", { type: "button", class: "btn", hidden: true, onclick: () => load() }, "Load more threads");
    const wrap = h("div", { class: "table-wrap", tabindex: "0" }, h("table", {},
      h("caption", { class: "sr-only" }, "Threads, newest activity first"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Thread"), h("th", { scope: "col", class: "num" }, "Runs"),
        h("th", { scope: "col", class: "num" }, "Artifacts"), h("th", { scope: "col" }, "Last run"))), tbody));
    const empty = h("div", { class: "empty-state", hidden: true }, h("h2", {}, "No threads yet"),
      h("p", {}, "A thread groups an agent's runs and the files they write under /out. Give runs a ",
        h("code", {}, "thread_id"), " (REST), or use the same MCP session, and their artifacts collect here with every version."));
    root.append(h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Threads"),
      h("p", {}, "Conversations of runs and the artifacts they made."))), empty, wrap, more);
    let cursor = null, count = 0;
    async function load() {
      const q = new URLSearchParams({ limit: "50" });
      if (cursor) q.set("cursor", cursor);
      const doc = await api.get(`/v1/threads?${q}`);
      if (!ctx.current()) return;
      for (const t of doc.threads) {
        count++;
        tbody.append(h("tr", {},
          h("td", {}, h("a", { href: `#/threads/${encodeURIComponent(t.id)}`, class: "mono" }, t.id)),
          h("td", { class: "num" }, t.runs), h("td", { class: "num" }, t.artifacts),
          h("td", { title: fmtTime(t.last_run_at) }, fmtAgo(t.last_run_at))));
      }
      cursor = doc.next_cursor;
      more.hidden = !cursor;
      empty.hidden = count > 0;
      wrap.hidden = count === 0;
    }
    await load();
  },
};
