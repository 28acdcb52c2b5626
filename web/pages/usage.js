// Usage (#/usage): the organisation's credit balance, the workspace's
// ledger, and its runs per day by state, language and interface as inline
// SVG charts with text alternatives (GET /v1/usage and its `days`).
import { card, errWords, stackedChart, table, when } from "./admin_kit.js";

const STATE_ORDER = ["succeeded", "failed", "timed_out", "killed", "canceled", "error", "denied",
  "pending_approval", "queued", "provisioning", "running"];
const VIA_WORDS = { rest: "REST", mcp: "MCP", piston: "Piston", e2b: "E2B" };
// states in words, as Activity's badges say them ("timed out", not timed_out)
const STATE_WORDS = Object.fromEntries(STATE_ORDER.map((s) => [s, s.replace(/_/g, " ")]));

// The series of a `days` field (by_state, ...), in a stable order: known names first.
function seriesOf(days, key, order) {
  const seen = new Set();
  for (const d of days) for (const k of Object.keys(d[key] || {})) seen.add(k);
  const known = (order || []).filter((k) => seen.has(k));
  return [...known, ...[...seen].filter((k) => !known.includes(k)).sort()];
}

// A charge takes credits, a refund gives them back, a grant is signed (one may take back).
function signed(e) {
  const neg = e.kind === "charge" || (e.kind === "grant" && e.amount < 0);
  return (neg ? "−" : "+") + Math.abs(e.amount);
}

function chartOf(h, title, days, key, order, words) {
  const names = seriesOf(days, key, order);
  const label = (n) => (words && words[n]) || n;
  const rows = days.map((d) => ({ date: d.date,
    counts: Object.fromEntries(names.map((n) => [label(n), (d[key] || {})[n] || 0])) }));
  return stackedChart(h, title, rows, names.map(label));
}

export default {
  path: "#/usage",
  title: "Usage",
  nav: true,
  roles: null,
  render: async (root, ctx) => {
    const { api, h } = ctx;
    root.classList.add("adm-page");
    root.replaceChildren(h("h1", {}, "Usage"));
    let u;
    try {
      u = await api.get("/v1/usage?limit=100");
    } catch (e) {
      root.append(h("p", { class: "adm-error", role: "alert" }, "Usage could not be read: " + errWords(e)));
      return;
    }
    const days = u.days || [];
    const runs30 = days.reduce((s, d) => s + d.runs, 0);
    const credits30 = days.reduce((s, d) => s + (d.credits || 0), 0);
    root.append(h("div", { class: "adm-stats" },
      h("div", { class: "adm-stat" }, h("span", { class: "adm-stat-label" }, "Credit balance"),
        h("span", { class: "adm-stat-value", id: "adm-balance" }, String(u.balance))),
      h("div", { class: "adm-stat" }, h("span", { class: "adm-stat-label" }, "Runs, last 30 days"),
        h("span", { class: "adm-stat-value" }, String(runs30))),
      h("div", { class: "adm-stat" }, h("span", { class: "adm-stat-label" }, "Credits spent, last 30 days"),
        h("span", { class: "adm-stat-value" }, String(credits30)))));

    if (days.length) {
      root.append(card(h, "Runs per day", h("div", { class: "adm-charts" },
        chartOf(h, "Runs per day by state", days, "by_state", STATE_ORDER, STATE_WORDS),
        chartOf(h, "Runs per day by language", days, "by_language", ["python", "node", "bash"]),
        chartOf(h, "Runs per day by interface", days, "by_via", ["rest", "mcp", "piston", "e2b"], VIA_WORDS),
        stackedChart(h, "Credits charged per day", days.map((d) => ({ date: d.date, counts: { credits: d.credits || 0 } })),
          ["credits"]))));
    } else {
      const rows = Object.entries(u.runs.by_state).map(([k, v]) => [STATE_WORDS[k] || k, String(v)]);
      root.append(card(h, "Runs",
        rows.length ? table(h, "Runs by state", ["State", "Runs"], rows)
          : h("p", { class: "empty" }, "No runs yet: start one from an agent (see Activity for the calls to paste).")));
    }

    const ledger = u.ledger.map((e) => [when(e.created_at), e.kind,
      signed(e),
      e.run_id ? h("a", { href: "#/runs/" + e.run_id }, e.run_id) : "—", String(e.balance_after)]);
    root.append(card(h, "Ledger",
      ledger.length ? table(h, "Credit ledger, newest first", ["When", "Kind", "Amount", "Run", "Balance after"], ledger,
        "adm-ledger")
        : h("p", { class: "empty" }, "No charges or grants yet.")));
  },
};
