// Settings → Code execution (#/settings): the workspace's settings as GET
// /v1/settings shows them, changed with PATCH /v1/settings (admins; the API
// refuses others with 403, and the page says so), and the recent
// settings.changed audit events. Secrets are write-only: names are listed,
// a value is entered, replaced or deleted, never shown back.
import { badge, card, errWords, table, when } from "./admin_kit.js";

const MODES = [
  ["offline", "Offline", "No network at all: only loopback."],
  ["packages", "Package installs", "The package registries only (PyPI, npm)."],
  ["hosts", "Custom hosts", "Exactly the hostnames listed below."],
  ["internet", "Internet access", "Any public address."],
];
const POLICIES = [
  ["never", "Never: runs start at once"],
  ["high_risk", "High-risk runs: code execution waits for an approver"],
  ["always", "Always: every run waits for an approver"],
];
const TOOLS = [
  ["code_execution", "Code execution (POST /v1/runs, MCP code_execution, Piston, E2B)"],
  ["run_skill_script", "Skills (run_skill_script, POST /v1/skills/{name}/run)"],
];
const HOST_RE = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/;
const DLP_NAME_RE = /^[a-z0-9_]{1,40}$/;
const DAY = 86400;

// The default policy's mode, hosts and whether registries are included, read from `network`.
function parseNetwork(net) {
  const m = /^hosts(\+packages)?:(.*)$/.exec(net || "");
  if (m) return { mode: "hosts", withPackages: !!m[1], hosts: m[2].split(",").filter(Boolean) };
  return { mode: net || "offline", withPackages: false, hosts: [] };
}

// Whether setting K's value V is the one shown (S): lists of names in any order are the same set.
function same(k, v, s) {
  if (k === "dlp_patterns" || !Array.isArray(v)) return JSON.stringify(v) === JSON.stringify(s);
  return JSON.stringify([...v].sort()) === JSON.stringify([...(s || [])].sort());
}

function lines(text) {
  return text.split("\n").map((s) => s.trim()).filter(Boolean);
}

function field(h, label, input, hint) {
  const id = input.id;
  return h("div", { class: "adm-field" }, h("label", { for: id }, label), input,
    hint ? h("p", { class: "adm-hint", id: id + "-hint" }, hint) : null);
}

function num(h, id, value, attrs) {
  return h("input", { id, type: "number", value: String(value), inputmode: "decimal", ...attrs });
}

function check(h, id, label, checked, attrs) {
  const box = h("input", { id, type: "checkbox", ...attrs });
  box.checked = !!checked;
  return h("div", { class: "adm-check" }, box, h("label", { for: id }, label));
}

// ---- the sections of the page, each a builder: its nodes and, for the
// form's sections, read(errors) giving its settings as PATCH takes them

function driverCard(h, s) {
  const rows = Object.entries(s.badges || {}).map(([name, b]) => [name, badge(h, b), b.detail || ""]);
  return card(h, "Driver and enforcement",
    h("p", {}, "Runs of this workspace use the ", h("strong", {}, s.driver), " driver (the service's: ",
      s.service.driver, "). Each control shows how it is held on this host."),
    table(h, "Controls of the driver", ["Control", "Badge", "Condition or gap"], rows, "adm-badges"));
}

function networkSection(h, s) {
  const net = parseNetwork(s.network);
  const allowed = new Set(s.network_allowed);
  const radios = MODES.map(([m, label, what]) => {
    const b = s.network_modes[m];
    const r = h("input", { type: "radio", name: "adm-net-default", id: "adm-net-" + m, value: m });
    r.checked = net.mode === m;
    return h("div", { class: "adm-radio" }, r,
      h("label", { for: "adm-net-" + m }, h("strong", {}, label), " — ", what, " ", badge(h, b)),
      b && b.detail ? h("p", { class: "adm-hint" }, b.detail) : null);
  });
  const hostsBox = h("textarea", { id: "adm-hosts", rows: "4", spellcheck: "false", autocomplete: "off",
    "aria-describedby": "adm-hosts-hint" });
  hostsBox.value = s.network_hosts.join("\n");
  const internetWarn = h("p", { class: "adm-warning", role: "note" },
    "Internet access is permissive: a script can reach any public address and send it whatever it read. " +
    "Prefer Custom hosts where you can.");
  const node = card(h, "Network",
    h("fieldset", {}, h("legend", {}, "Default policy of runs that name none"), ...radios),
    field(h, "Custom hosts (exact hostnames, one per line)", hostsBox,
      "No wildcards: each name is matched exactly. A run may name only hosts listed here."),
    check(h, "adm-hosts-pkgs", "Include the package registries with these hosts", net.withPackages), internetWarn,
    h("fieldset", {}, h("legend", {}, "Modes a run may ask for"),
      ...MODES.map(([m, label]) => check(h, "adm-allow-" + m, label, allowed.has(m), { value: m })),
      h("p", { class: "adm-hint" }, "The default policy's mode is always allowed.")));
  const q = (sel) => node.querySelector(sel);
  const mode = () => q("input[name=adm-net-default]:checked")?.value || "offline";
  // the default's mode is allowed while it is the default; a mode allowed
  // only because it was the default is no longer once another is chosen
  let forced = null;
  const sync = () => {
    const m = mode();
    if (forced && forced !== m) {
      q("#adm-allow-" + forced).checked = false;
      forced = null;
    }
    for (const [other] of MODES) {
      const c = q("#adm-allow-" + other);
      if (other === m && !c.checked) {
        c.checked = true;
        forced = other;
      }
      c.disabled = other === m;
    }
    internetWarn.hidden = !(m === "internet" || q("#adm-allow-internet").checked);
  };
  node.addEventListener("change", sync);
  sync();
  const read = (errors) => {
    const m = mode();
    const hosts = lines(hostsBox.value).map((x) => x.toLowerCase());
    for (const x of hosts) if (!HOST_RE.test(x)) errors.push(`"${x}" is not an exact hostname (no wildcards, ports or schemes)`);
    const pk = q("#adm-hosts-pkgs").checked;
    let network = m;
    if (m === "hosts") {
      if (!hosts.length) errors.push("Custom hosts needs at least one hostname");
      network = (pk ? "hosts+packages:" : "hosts:") + hosts.join(",");
    }
    const allowedNow = MODES.map(([x]) => x).filter((x) => q("#adm-allow-" + x).checked || x === m);
    if (m === "hosts" && pk && !allowedNow.includes("packages")) allowedNow.push("packages");
    return { network, network_allowed: allowedNow, network_hosts: hosts };
  };
  return { node, read };
}

function limitsSection(h, s) {
  const svc = s.service;
  const drivers = [...new Set([svc.driver, s.driver, "disabled"])];
  const driverSel = h("select", { id: "adm-driver" }, ...drivers.map((d) => h("option", { value: d },
    d === "disabled" ? "disabled — no code runs in this workspace" : `${d} — the service's sandbox`)));
  driverSel.value = s.driver;
  const policySel = h("select", { id: "adm-approval" }, ...POLICIES.map(([v, t]) => h("option", { value: v }, t)));
  policySel.value = s.approval_policy;
  const retentionShown = String(Math.round(s.run_retention_s / DAY * 100) / 100);
  const nodes = [
    card(h, "Limits",
      field(h, "Driver", driverSel, `Each run costs ${s.price_per_run} credits (the operator sets the price).`),
      h("div", { class: "adm-grid2" },
        field(h, "Wall clock, default (seconds)", num(h, "adm-timeout", s.timeout_s, { min: "1", max: String(svc.max_timeout_s) })),
        field(h, "Wall clock, most a run may ask (seconds)", num(h, "adm-max-timeout", s.max_timeout_s,
          { min: "1", max: String(svc.max_timeout_s) }), `At most the service's ${svc.max_timeout_s} s.`),
        field(h, "Memory (MiB)", num(h, "adm-memory", s.memory_mb, { min: "16" })),
        field(h, "CPU (cores)", num(h, "adm-cpus", s.cpus, { min: "0.1", step: "0.1" })),
        field(h, "Concurrent runs per person", num(h, "adm-concurrency", s.concurrency,
          { min: "1", max: String(svc.per_person) }), `At most the service's ${svc.per_person}.`),
        field(h, "E2B sandbox lifetime, most (seconds)", num(h, "adm-sandbox-max", s.sandbox_max_timeout_s,
          { min: "1", max: "86400" }), "From 1 s to 24 h."))),
    card(h, "Approvals",
      field(h, "Approvals required", policySel),
      field(h, "An approval waits at most (seconds)", num(h, "adm-approval-ttl", s.approval_ttl_s, { min: "1" })),
      check(h, "adm-self-approval", "Let a requester approve their own run (audited)", s.allow_self_approval)),
    card(h, "Tool allow-list",
      h("fieldset", {}, h("legend", {}, "Tools agents may call"),
        ...TOOLS.map(([t, label]) => check(h, "adm-tool-" + t, label, s.tools.includes(t))))),
    card(h, "Retention",
      field(h, "Keep an ended run's code, output and events (days)",
        num(h, "adm-retention", retentionShown, { min: "1", max: "3650", step: "any" }),
        "From 1 day to 10 years. Audit events are kept regardless.")),
  ];
  const q = (sel) => nodes.map((n) => n.querySelector(sel)).find(Boolean);
  const numberOf = (id) => Number(q("#" + id).value);
  const read = (errors) => {
    const want = {
      driver: driverSel.value, sandbox_max_timeout_s: numberOf("adm-sandbox-max"),
      timeout_s: numberOf("adm-timeout"), max_timeout_s: numberOf("adm-max-timeout"),
      memory_mb: numberOf("adm-memory"), cpus: numberOf("adm-cpus"), concurrency: numberOf("adm-concurrency"),
      approval_policy: policySel.value, approval_ttl_s: numberOf("adm-approval-ttl"),
      allow_self_approval: q("#adm-self-approval").checked,
      tools: TOOLS.map(([t]) => t).filter((t) => q("#adm-tool-" + t).checked),
      // in days on the page: a value not retyped keeps its exact seconds
      run_retention_s: q("#adm-retention").value === retentionShown ? s.run_retention_s
        : Math.round(numberOf("adm-retention") * DAY),
    };
    for (const [k, v] of Object.entries(want))
      if (typeof v === "number" && !Number.isFinite(v)) errors.push(`${k}: enter a number`);
    return want;
  };
  return { nodes, read };
}

function dlpSection(h, s) {
  const list = h("div", { class: "adm-dlp-list" });
  const add = (p) => {
    const i = list.children.length;
    const name = h("input", { type: "text", class: "adm-dlp-name", "aria-label": `Pattern ${i + 1} name`,
      value: p.name, maxlength: "40", autocomplete: "off", spellcheck: "false" });
    const pat = h("input", { type: "text", class: "adm-dlp-pattern", "aria-label": `Pattern ${i + 1} regular expression`,
      value: p.pattern, maxlength: "512", autocomplete: "off", spellcheck: "false" });
    const row = h("div", { class: "adm-dlp-row" }, name, pat,
      h("button", { type: "button", class: "btn btn-quiet", onclick: () => {
        row.remove();
        list.dispatchEvent(new Event("input", { bubbles: true }));   // a change: old errors go
      } }, `Remove pattern ${i + 1}`));
    list.append(row);
  };
  (s.dlp_patterns || []).forEach(add);
  const error = h("p", { class: "adm-error", role: "alert", id: "adm-dlp-error" });
  const node = card(h, "DLP patterns",
    h("p", { class: "adm-hint" }, "Output that matches a pattern (PCRE2, on bytes) is replaced by [REDACTED:name], " +
      "besides the built-in redactions (cloud keys, private keys, tokens, passwords in URLs). " +
      "Names: lowercase letters, digits and _. At most 32 patterns."),
    list,
    h("button", { type: "button", class: "btn btn-quiet", onclick: () => add({ name: "", pattern: "" }) }, "Add pattern"),
    error);
  // checked here what the page can check; whether PCRE2 compiles it within bounds, the API says
  const read = (errors) => {
    const patterns = [...list.children].map((row) => ({
      name: row.querySelector(".adm-dlp-name").value.trim(),
      pattern: row.querySelector(".adm-dlp-pattern").value,
    }));
    patterns.forEach((p, i) => {
      if (!p.name || !p.pattern) errors.push(`DLP pattern ${i + 1}: both a name and a pattern are needed`);
      else if (!DLP_NAME_RE.test(p.name)) errors.push(`DLP pattern ${i + 1}: the name may use only a-z, 0-9 and _ (at most 40)`);
    });
    return { dlp_patterns: patterns };
  };
  return { node, error, read };
}

// Saved secrets, write-only: ST.s is the settings shown (replaced by each
// answer); CHANGED() is called after each change is saved.
function secretsCard(ctx, st, changed) {
  const { api, h, toast } = ctx;
  const list = h("ul", { class: "adm-secrets", "aria-label": "Saved secrets" });
  const name = h("input", { id: "adm-secret-name", type: "text", maxlength: "64", autocomplete: "off", spellcheck: "false" });
  const value = h("input", { id: "adm-secret-value", type: "password", maxlength: "4096", autocomplete: "new-password" });
  const error = h("p", { class: "adm-error", role: "alert" });
  const save = async (change, done) => {
    error.textContent = "";
    try {
      st.s = await api.patch("/v1/settings", { secrets: change });
      draw();
      toast(done, "ok");
      await changed();
    } catch (e) {
      error.textContent = "Not saved: " + errWords(e);
    }
  };
  const draw = () => list.replaceChildren(...(st.s.secrets.length ? st.s.secrets.map((n) => h("li", {},
    h("code", {}, n), h("span", { class: "adm-hint" }, " value set, never shown"),
    h("button", { type: "button", class: "btn btn-quiet", onclick: () => {
      name.value = n;
      value.focus();
    } }, `Replace ${n}`),
    h("button", { type: "button", class: "btn btn-danger", onclick: () => save({ [n]: null }, `Secret ${n} deleted.`) },
      `Delete ${n}`)))
    : [h("li", { class: "empty" }, "No secrets saved. Add one below: runs read it by name.")]));
  draw();
  const form = h("form", { class: "adm-inline-form", novalidate: "" },
    field(h, "Secret name", name), field(h, "Value", value),
    h("button", { type: "submit", class: "btn btn-primary" }, "Save secret"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const n = name.value.trim();
    const v = value.value;
    if (!n || !v) {
      error.textContent = "Not saved: enter both a name and a value.";
      return;
    }
    // the value leaves the page at once: it is never kept nor shown again
    value.value = "";
    await save({ [n]: v }, `Secret ${n} saved.`);
    name.value = "";
  });
  return card(h, "Saved secrets",
    h("p", { class: "adm-hint" }, "Write-only: a value is entered or replaced here and never shown back, not to admins either."),
    list, form, error);
}

// The recent settings.changed audit events: the node and its refresher.
async function changesCard(ctx) {
  const { api, h } = ctx;
  const box = h("div", { class: "adm-changes" });
  const names = new Map();
  try {
    for (const x of (await api.get("/v1/persons")).persons || []) names.set(x.id, x.name);
  } catch { /* ids are shown */ }
  const refresh = async () => {
    try {
      const a = await api.get("/v1/audit?kind=settings.changed&limit=10");
      box.replaceChildren(a.events.length
        ? table(h, "Recent settings changes", ["When", "By", "Settings changed"], a.events.map((e) => [
          when(e.created_at), names.get(e.data.by) || e.data.by || "—", (e.data.keys || []).join(", ")]),
        "adm-changes-table")
        : h("p", { class: "empty" }, "No change yet. Changes appear here and in the audit trail."));
    } catch (e) {
      box.replaceChildren(h("p", { class: "adm-error" }, "The audit trail could not be read: " + errWords(e)));
    }
  };
  await refresh();
  return { node: card(h, "Recent changes", box), refresh };
}

export default {
  path: "#/settings",
  title: "Settings",
  nav: true,
  roles: ["admin"],
  render: async (root, ctx) => {
    const { api, h, toast } = ctx;
    root.classList.add("adm-page");
    root.replaceChildren(h("h1", {}, "Settings — Code execution"));
    const st = { s: null };
    try {
      st.s = await api.get("/v1/settings");
    } catch (e) {
      root.append(h("p", { class: "adm-error", role: "alert" }, "The settings could not be read: " + errWords(e)));
      return;
    }
    const changes = await changesCard(ctx);
    const net = networkSection(h, st.s);
    const limits = limitsSection(h, st.s);
    const dlp = dlpSection(h, st.s);
    const saveBtn = h("button", { type: "submit", class: "btn btn-primary" }, "Save settings");
    const saveError = h("p", { class: "adm-error", role: "alert", id: "adm-save-error" });
    const form = h("form", { class: "adm-form adm-settings-form", novalidate: "" }, net.node, ...limits.nodes, dlp.node,
      h("div", { class: "adm-actions" }, saveBtn, saveError));
    root.append(driverCard(h, st.s), form, secretsCard(ctx, st, changes.refresh), changes.node);

    // an error said about the last attempt goes once the form is changed again
    form.addEventListener("input", () => {
      saveError.textContent = "";
      dlp.error.textContent = "";
    });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      saveError.textContent = "";
      dlp.error.textContent = "";
      const errors = [];
      const want = { ...net.read(errors), ...limits.read(errors), ...dlp.read(errors) };
      if (errors.length) {
        saveError.textContent = "Not saved: " + errors.join("; ") + ".";
        return;
      }
      // only what changed is sent, so the audit event names exactly the settings changed
      const patch = Object.fromEntries(Object.entries(want).filter(([k, v]) => !same(k, v, st.s[k])));
      if (!Object.keys(patch).length) {
        toast("Nothing changed.", "info");
        return;
      }
      saveBtn.disabled = true;
      try {
        st.s = await api.patch("/v1/settings", patch);
        toast("Settings saved: " + Object.keys(patch).join(", "), "ok");
        await changes.refresh();
      } catch (e) {
        const words = "Not saved: " + errWords(e);
        saveError.textContent = words;
        if ("dlp_patterns" in patch && /dlp/i.test(words)) dlp.error.textContent = words;
      } finally {
        saveBtn.disabled = false;
      }
    });
  },
};
