// Sandboxes (#/sandboxes): the workspace's E2B sandboxes (GET
// /v1/sandboxes): state, owner, time left, their files; Kill (the owner or
// an admin; the API decides).
import { h, badge, fmtBytes, fmtLeft, fmtTime } from "../dom.js";

export default {
  path: "#/sandboxes",
  title: "Sandboxes",
  nav: true,
  roles: null,
  async render(root, ctx) {
    const { api, session } = ctx;
    const box = h("div", {});
    root.append(h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Sandboxes"),
      h("p", {}, "E2B sandboxes of the workspace: long-lived boxes an agent drives with the E2B SDK."))), box);
    const clocks = new Map();
    async function load() {
      let doc;
      try { doc = await api.get("/v1/sandboxes"); }
      catch (e) { box.replaceChildren(h("div", { class: "alert alert-error", role: "alert" }, e.message)); return; }
      if (!ctx.current()) return;
      clocks.clear();
      if (!doc.sandboxes.length) {
        box.replaceChildren(h("div", { class: "empty-state" }, h("h2", {}, "No sandboxes"),
          h("p", {}, "An agent creates one with the E2B SDK pointed at this service:"),
          h("pre", { class: "snippet", tabindex: "0", "aria-label": "E2B environment variables" }, h("code", {},
            `export E2B_API_URL=${location.origin}\nexport E2B_SANDBOX_URL=${location.origin}\nexport E2B_API_KEY=YOUR_API_KEY`))));
        return;
      }
      const tbody = h("tbody", {});
      for (const s of doc.sandboxes) {
        const left = h("td", {}, fmtLeft(s.end_at));
        clocks.set(left, s.end_at);
        const filesRow = h("tr", { hidden: true, class: "preview-row" }, h("td", { colspan: "7" }));
        const filesBtn = h("button", { type: "button", class: "btn btn-quiet", "aria-expanded": "false",
          onclick: async () => {
            const open = filesRow.hidden;
            filesRow.hidden = !open;
            filesBtn.setAttribute("aria-expanded", String(open));
            if (!open) return;
            try {
              const f = await api.get(`/v1/sandboxes/${encodeURIComponent(s.id)}/files`);
              filesRow.firstChild.replaceChildren(f.files.length ? h("ul", { class: "files" }, f.files.map((x) =>
                h("li", {}, h("code", {}, x.path), " ", h("span", { class: "muted" }, fmtBytes(x.size))))) : h("p", { class: "muted" }, "No files."));
            } catch (e) { filesRow.firstChild.replaceChildren(h("p", { class: "alert alert-error" }, e.message)); }
          } }, `${s.files} file${s.files === 1 ? "" : "s"}`, h("span", { class: "sr-only" }, ` in ${s.id}`));
        const mayKill = session.person.role === "admin" || (s.person && s.person.id === session.person.id);
        const kill = h("button", { type: "button", class: "btn btn-danger", "aria-label": `Kill ${s.id}`, onclick: async () => {
          if (!confirm(`Kill sandbox ${s.id}? Its processes end and its files are removed.`)) return;
          kill.disabled = true;
          try { await api.del(`/v1/sandboxes/${encodeURIComponent(s.id)}`); ctx.toast(`Sandbox ${s.id} killed.`, "ok"); load(); }
          catch (e) { ctx.toast(e.message, "error"); kill.disabled = false; }
        } }, "Kill");
        left.dataset.label = "Time left";
        tbody.append(h("tr", { "data-sandbox": s.id },
          h("td", { class: "mono", "data-label": "Sandbox" }, s.id),
          h("td", { "data-label": "State" }, badge(s.state, s.state === "running" ? "live" : "wait")),
          h("td", { "data-label": "Owner" }, s.person ? s.person.name : "—"), left,
          h("td", { "data-label": "Files" }, filesBtn, h("span", { class: "muted" }, ` ${fmtBytes(s.bytes)}`)),
          h("td", { class: "hide-narrow" }, fmtTime(s.created_at)),
          h("td", {}, mayKill ? kill : null)), filesRow);
      }
      box.replaceChildren(h("div", { class: "table-wrap", tabindex: "0" }, h("table", { class: "stack" },
        h("thead", {}, h("tr", {}, ["Sandbox", "State", "Owner", "Time left", "Files", "Created", ""].map((t, i) =>
          h("th", { scope: "col", class: i === 5 ? "hide-narrow" : null }, t || h("span", { class: "sr-only" }, "Actions"))))), tbody)));
    }
    await load();
    const tick = setInterval(() => { for (const [el, at] of clocks) el.textContent = fmtLeft(at); }, 1000);
    const again = setInterval(load, 15000);
    return () => { clearInterval(tick); clearInterval(again); };
  },
};
