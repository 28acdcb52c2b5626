// Approvals (#/approvals): the workspace's runs awaiting a decision, as
// cards with the exact code, input manifest and packages, language and runtime,
// risk, the agent's description, the requester and the time left. Approve
// and Deny (with a reason) for admins and approvers, never on their own
// run (the API refuses that too, and its words are shown). Below, the
// latest decided cards: who decided, when, what.
import { h, badge, fmtTime, fmtLeft, fmtAgo, VIA_LABEL, keyLabel } from "../dom.js";
import { codeView } from "../code.js";
import { manifest, hasPackages, packagesPlanned } from "../parts.js";

const DECIDED_SHOWN = 10;
const agentOf = (run) => (run.requested_by && run.requested_by.key
  ? h("span", { class: "who-key muted", title: `API key ${run.requested_by.key.id}` }, "key ", keyLabel(run.requested_by.key)) : null);
// a decision in words (a requester's cancel of their pending run is a withdrawal)
const DECIDED = { approved: "Approved", denied: "Denied", canceled: "Withdrawn" };

export default {
  path: "#/approvals",
  title: "Approvals",
  nav: true,
  roles: null,
  async render(root, ctx) {
    const { api, session } = ctx;
    const decides = ["admin", "approver"].includes(session.person.role);
    const pendingBox = h("div", { "aria-live": "polite" });
    const decidedBox = h("div", {});
    const clocks = new Map();   // element -> expires_at
    root.append(
      h("div", { class: "page-head" }, h("div", {}, h("h1", {}, "Approvals"),
        h("p", {}, decides ? "Read the exact code and inputs, then approve or deny. You cannot decide your own runs."
          : "Runs awaiting an approver. Admins and approvers decide; you can withdraw your own."))),
      h("h2", {}, "Pending"), pendingBox, h("h2", {}, "Recently decided"), decidedBox);

    const names = new Map((await api.get("/v1/persons").then((d) => d.persons).catch(() => [])).map((p) => [p.id, p.name]));

    function pendingCard(run) {
      const ap = run.approval || {};
      const mine = run.requested_by && run.requested_by.id === session.person.id;
      const left = h("span", { class: "left" }, fmtLeft(ap.expires_at));
      clocks.set(left, ap.expires_at);
      const msg = h("div", { role: "alert", class: "card-msg" });
      const reason = h("textarea", { name: "reason", required: true, maxlength: "1000", "aria-label": "Reason for denying",
        placeholder: "Why is this run denied? The requester sees it." });
      const denyForm = h("form", { class: "deny-form", hidden: true, onsubmit: async (e) => {
        e.preventDefault();
        await decide("deny", { reason: reason.value.trim() });
      } }, h("label", { class: "field" }, "Reason", reason),
        h("div", { class: "actions" }, h("button", { type: "submit", class: "btn btn-danger" }, "Deny run"),
          h("button", { type: "button", class: "btn btn-quiet", onclick: () => { denyForm.hidden = true; } }, "Keep pending")));
      const buttons = [];
      async function decide(what, body) {
        for (const b of buttons) b.disabled = true;
        msg.replaceChildren();
        try {
          await api.post(`/v1/runs/${encodeURIComponent(run.id)}/${what}`, body);
          ctx.toast(what === "approve" ? "Approved: the run is queued." : what === "deny" ? "Denied." : "Withdrawn.", "ok");
          ctx.pendingChanged();
          load();
        } catch (err) {
          msg.replaceChildren(h("div", { class: "alert alert-error" }, err.message));
          for (const b of buttons) b.disabled = false;
        }
      }
      let actions;
      if (mine) {
        const withdraw = h("button", { type: "button", class: "btn btn-danger", onclick: () => decide("cancel") }, "Withdraw");
        buttons.push(withdraw);
        actions = [h("p", { class: "muted" }, "You asked for this run: another approver decides it."), h("div", { class: "actions" }, withdraw)];
      } else if (decides) {
        const approve = h("button", { type: "button", class: "btn btn-ok", onclick: () => decide("approve", { hash: ap.hash }) }, "Approve");
        const deny = h("button", { type: "button", class: "btn btn-danger", onclick: () => { denyForm.hidden = false; reason.focus(); } }, "Deny");
        buttons.push(approve, deny);
        actions = [h("div", { class: "actions" }, approve, deny), denyForm];
      } else actions = [h("p", { class: "muted" }, "An admin or approver decides this run.")];
      return h("article", { class: "card approval", "data-run": run.id, "aria-label": `Approval of run ${run.id}` },
        h("div", { class: "approval-head" },
          h("span", { class: "title" }, run.description || "No description given"),
          badge("pending_approval"),
          ap.risk ? h("span", { class: `badge badge-${ap.risk === "high" ? "bad" : ap.risk === "low" ? "ok" : "warn"}` }, `risk ${ap.risk}`) : null),
        h("div", { class: "meta" },
          h("span", {}, "Requested by ", h("strong", {}, run.requested_by ? run.requested_by.name : "—")),
          // which of their agents asked: the key's name, an item of its own
          // (so that a phone wraps the items whole, not the name in two)
          agentOf(run),
          run.via ? h("span", {}, "via ", VIA_LABEL[run.via] || run.via) : null,
          h("span", {}, `${ap.language || run.language}${ap.runtime ? ` · ${ap.runtime}` : ""}`),
          h("span", {}, "network ", h("code", {}, ap.network || run.network)),
          h("span", { title: fmtTime(ap.requested_at) }, "asked ", fmtAgo(ap.requested_at)),
          left,
          h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono" }, run.id)),
        codeView(ap.code || "", ap.language || run.language, `Code of run ${run.id}`),
        h("h3", { class: "inputs-title" }, "Inputs"),
        ...manifest(ap.inputs),
        // the packages its install box will fetch from the registries (the
        // thread's set with the run's over it): approving binds them
        ap.packages && hasPackages(ap.packages) ? [h("h3", { class: "inputs-title" }, "Packages"),
          h("p", { class: "muted" }, "Installed from the package registries before the run, in a box of their own."),
          packagesPlanned(ap.packages)] : null,
        msg, ...actions);
    }

    function decidedCard(run) {
      const ap = run.approval || {};
      const who = ap.decided_by ? (names.get(ap.decided_by) || ap.decided_by) : "—";
      return h("article", { class: `card approval decided-${ap.decision}`, "data-run": run.id, "aria-label": `Decision on run ${run.id}` },
        h("div", { class: "approval-head" },
          h("span", { class: "title" }, run.description || "No description given"),
          badge(ap.decision, ap.decision === "approved" ? "ok" : ap.decision === "canceled" ? "muted" : "bad"), badge(run.state)),
        h("div", { class: "meta" },
          ap.decision === "expired" ? h("span", {}, "Expired unanswered")
            : h("span", {}, `${DECIDED[ap.decision] || ap.decision} by `, h("strong", {}, who)),
          h("span", {}, fmtTime(ap.decided_at)),
          h("span", {}, "requested by ", run.requested_by ? run.requested_by.name : "—"),
          agentOf(run),
          h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono" }, run.id)),
        ap.reason ? h("p", {}, h("strong", {}, "Reason: "), ap.reason) : null);
    }

    let loading = null;
    async function load() {
      if (loading) return loading;
      loading = (async () => {
        try {
          const [pend, recent] = await Promise.all([
            api.get("/v1/runs?state=pending_approval&limit=50"),
            api.get("/v1/runs?limit=100"),
          ]);
          const full = await Promise.all(pend.runs.slice(0, 20).map((r) => api.get(`/v1/runs/${encodeURIComponent(r.id)}`).catch(() => null)));
          const decidedIds = recent.runs.filter((r) => r.approval && r.approval.decision && r.approval.decision !== "pending").slice(0, DECIDED_SHOWN);
          const decided = await Promise.all(decidedIds.map((r) => api.get(`/v1/runs/${encodeURIComponent(r.id)}`).catch(() => null)));
          if (!ctx.current()) return;
          clocks.clear();
          const cards = full.filter((r) => r && r.state === "pending_approval").map(pendingCard);
          pendingBox.replaceChildren(...(cards.length ? cards : [h("div", { class: "empty-state" },
            h("p", {}, "Nothing awaits approval. When the workspace's approval policy asks for one (",
              ctx.session.person.role === "admin" ? h("a", { href: "#/settings" }, "Settings → Code execution") : "an admin's Settings → Code execution",
              "), an agent's run waits here with its exact code until someone decides."))]));
          if (pend.runs.length > 20) pendingBox.append(h("p", { class: "muted" }, `${pend.runs.length - 20} more wait: decide these first.`));
          const dcards = decided.filter(Boolean).map(decidedCard);
          decidedBox.replaceChildren(...(dcards.length ? dcards : [h("p", { class: "muted" }, "No decisions yet.")]));
        } catch (e) {
          pendingBox.replaceChildren(h("div", { class: "alert alert-error", role: "alert" }, e.message));
        } finally { loading = null; }
      })();
      return loading;
    }

    let again = null;
    const off = ctx.live((run) => {
      // a run entering or leaving approval: read the cards again (once per burst)
      if (run && run.state !== "pending_approval" && !pendingBox.querySelector(`[data-run="${CSS.escape(run.id)}"]`)) return;
      clearTimeout(again);
      again = setTimeout(load, 250);
    });
    const tick = setInterval(() => { for (const [el, at] of clocks) el.textContent = fmtLeft(at); }, 1000);
    await load();
    return () => { off(); clearInterval(tick); clearTimeout(again); };
  },
};
