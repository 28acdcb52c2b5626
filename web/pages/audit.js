// Audit (#/audit): the workspace's audit events, filtered by kind, person,
// run and time (GET /v1/audit), the chain's verification (GET
// /v1/audit/verify), its latest signed checkpoint (GET /v1/audit/checkpoint,
// admins) and the export (GET /v1/audit?format=ndjson, the same filter).
import { card, errWords, table, when } from "./admin_kit.js";

const KINDS = ["capability.invoke_allowed", "capability.invoke_denied", "tool.call", "approval.requested",
  "approval.approved", "approval.denied", "approval.expired", "settings.changed", "settings.self_approval_changed",
  "skill.uploaded", "skill.promoted", "skill.deleted", "key.created", "key.revoked", "key.rotated",
  "login_link.created", "session.signed_in", "session.signed_out", "price.changed"];
const PAGE = 50;
const DATA_MAX = 240;   // characters of an event's data shown in its row; the rest on demand

function isoOf(local) {
  if (!local) return "";
  const d = new Date(local);
  return isNaN(d) ? "" : d.toISOString();
}

export default {
  path: "#/audit",
  title: "Audit",
  nav: true,
  roles: null,
  render: async (root, ctx) => {
    const { api, h } = ctx;
    root.classList.add("adm-page");
    root.replaceChildren(h("h1", {}, "Audit trail"));
    const names = new Map();
    try {
      const p = await api.get("/v1/persons");
      for (const x of p.persons || []) names.set(x.id, x.name);
    } catch { /* ids are shown */ }

    // ---- the chain: verification and checkpoint
    const verify = h("div", { class: "adm-verify", role: "status", "aria-live": "polite" }, "Verifying the chain…");
    const checkpoint = h("div", { class: "adm-checkpoint" });
    const verifyBtn = h("button", { type: "button", class: "btn btn-quiet adm-verify-again" }, "Verify again");
    root.append(card(h, "Chain", verify, verifyBtn, checkpoint));
    const doVerify = async () => {
      try {
        const v = await api.get("/v1/audit/verify");
        const n = `${v.events} event${v.events === 1 ? "" : "s"}`;
        const cp = v.checkpoint;
        verify.replaceChildren(...[v.ok
          ? h("p", { class: "adm-ok" }, h("span", { class: "badge badge-ok" }, "Verified"),
            ` The chain is intact: ${n} checked, each linked to the one before` +
            (v.complete === false ? " (the newest part of a long chain; verify all of it with airlock admin audit verify)." : "."))
          : h("p", { class: "adm-error" }, h("span", { class: "badge badge-bad" }, "Broken"),
            ` The chain breaks at event ${v.first_bad_seq} (${n} checked): ${v.why || "an event was changed or removed in the store"}.`),
          cp ? (cp.held
            ? h("p", { class: "adm-ok" }, `It still holds the last checkpoint this service signed (event ${cp.seq}).`)
            : h("p", { class: "adm-error" }, `It no longer holds the checkpoint this service signed at event ${cp.seq}: ` +
              "the chain was cut back or rewritten in the store."))
            : null].filter(Boolean));
      } catch (e) {
        verify.replaceChildren(h("p", { class: "adm-error" }, "The chain could not be verified: " + errWords(e)));
      }
    };
    verifyBtn.addEventListener("click", doVerify);
    const doCheckpoint = async () => {
      try {
        const c = await api.get("/v1/audit/checkpoint");
        checkpoint.replaceChildren(h("h3", {}, "Latest checkpoint"),
          h("p", {}, `Head event ${c.seq}, hash `, h("code", { class: "adm-hash" }, c.hash), ". Signed now with the operator's key; keep a copy outside the store and check it with ",
            h("code", {}, "airlock admin audit verify --checkpoint FILE"), "."),
          h("pre", { class: "adm-pre", tabindex: "0", "aria-label": "Signed checkpoint" }, c.checkpoint),
          h("p", { class: "adm-hint" }, "Verifier key (pin the one the operator gives you, not this copy): ",
            h("code", { class: "adm-hash" }, c.verifier_key)));
      } catch (e) {
        checkpoint.replaceChildren(h("p", { class: "adm-hint" }, "Checkpoint: " + errWords(e)));
      }
    };
    // a checkpoint is signed for a workspace admin only (the API's rule)
    const isAdmin = ctx.session && ctx.session.person && ctx.session.person.role === "admin";
    if (!isAdmin)
      checkpoint.replaceChildren(h("p", { class: "adm-hint" }, "The chain's signed checkpoint is shown to workspace admins."));
    await Promise.all([doVerify(), isAdmin ? doCheckpoint() : null]);

    // ---- the filter
    const kind = h("input", { id: "adm-f-kind", type: "text", list: "adm-kinds", autocomplete: "off", spellcheck: "false",
      placeholder: "any kind" });
    const kinds = h("datalist", { id: "adm-kinds" }, ...KINDS.map((k) => h("option", { value: k })));
    const person = h("select", { id: "adm-f-person" }, h("option", { value: "" }, "anyone"),
      ...[...names].map(([id, n]) => h("option", { value: id }, n)));
    const run = h("input", { id: "adm-f-run", type: "text", autocomplete: "off", spellcheck: "false", placeholder: "run id" });
    const from = h("input", { id: "adm-f-from", type: "datetime-local" });
    const to = h("input", { id: "adm-f-to", type: "datetime-local" });
    const lbl = (id, t, el) => h("div", { class: "adm-field" }, h("label", { for: id }, t), el);
    const download = h("a", { class: "btn btn-quiet adm-download", href: "/v1/audit?format=ndjson", download: "audit.ndjson" },
      "Download");
    const filter = h("form", { class: "adm-filter", role: "search", "aria-label": "Filter audit events" },
      lbl("adm-f-kind", "Kind", kind), kinds, lbl("adm-f-person", "Person", person), lbl("adm-f-run", "Run", run),
      lbl("adm-f-from", "From", from), lbl("adm-f-to", "To", to),
      h("div", { class: "adm-actions" }, h("button", { type: "submit", class: "btn btn-primary" }, "Filter"), download));
    const list = h("div", { class: "adm-events" });
    const more = h("button", { type: "button", class: "btn btn-quiet", hidden: "" }, "Load more");
    const err = h("p", { class: "adm-error", role: "alert" });
    root.append(card(h, "Events", filter, err, list, more));

    const query = () => {
      const q = new URLSearchParams();
      if (kind.value.trim()) q.set("kind", kind.value.trim());
      if (person.value) q.set("person_id", person.value);
      if (run.value.trim()) q.set("run_id", run.value.trim());
      if (isoOf(from.value)) q.set("from", isoOf(from.value));
      if (isoOf(to.value)) q.set("to", isoOf(to.value));
      return q;
    };
    let cursor = null;
    let rows = [];
    // an event's fields in words (key: value, people by name); a long one opens to its JSON
    const words = (data) => Object.entries(data || {}).map(([k, v]) => `${k}: ${
      typeof v === "string" ? (names.get(v) || v) : Array.isArray(v) && v.every((x) => typeof x === "string")
        ? v.join(", ") : JSON.stringify(v)}`).join(" · ");
    const row = (e) => {
      const data = words(e.data);
      return [String(e.seq), when(e.created_at), h("code", {}, e.kind),
        e.person_id ? (names.get(e.person_id) || e.person_id) : "—",
        e.run_id ? h("a", { href: "#/runs/" + e.run_id }, e.run_id) : "—",
        data.length > DATA_MAX
          ? h("details", {}, h("summary", {}, data.slice(0, 100) + "…"), h("pre", { class: "adm-pre" }, JSON.stringify(e.data, null, 1)))
          : h("span", { class: "adm-data" }, data)];
    };
    const draw = () => {
      list.replaceChildren(rows.length
        ? table(h, `Audit events (${rows.length} shown, newest first)`, ["Seq", "When", "Kind", "Person", "Run", "Data"],
          rows.map(row), "adm-audit-table")
        : h("p", { class: "empty" }, "No event matches. Clear a filter, or widen the time range."));
      more.hidden = !cursor;
    };
    const load = async (append) => {
      err.textContent = "";
      const q = query();
      download.href = "/v1/audit?" + new URLSearchParams([...q, ["format", "ndjson"]]);
      q.set("limit", String(PAGE));
      if (append && cursor) q.set("cursor", cursor);
      try {
        const page = await api.get("/v1/audit?" + q);
        rows = append ? rows.concat(page.events) : page.events;
        cursor = page.next_cursor;
        draw();
      } catch (e) {
        err.textContent = "The events could not be read: " + errWords(e);
      }
    };
    filter.addEventListener("submit", (ev) => {
      ev.preventDefault();
      load(false);
    });
    more.addEventListener("click", () => load(true));
    await load(false);
  },
};
