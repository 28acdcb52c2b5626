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

export default {
  path: "#/settings",
  title: "Settings",
  nav: true,
  roles: ["admin"],
  render: async (root, ctx) => {
    const { api, h, toast, session } = ctx;
    const isAdmin = session && session.person && session.person.role === "admin";
    const status = h("p", { class: "adm-status", role: "status", "aria-live": "polite" });
    root.classList.add("adm-page");
    root.replaceChildren(h("h1", {}, "Settings — Code execution"), status);
    let s;
    try {
      s = await api.get("/v1/settings");
    } catch (e) {
      root.append(h("p", { class: "adm-error", role: "alert" }, "The settings could not be read: " + errWords(e)));
      return;
    }
    if (!isAdmin)
      root.append(h("p", { class: "adm-notice", role: "note" },
        "Only a workspace admin can change these settings; the API refuses a change from anyone else (403). " +
        "You can read them here."));

    // ---- the driver and its badges
    const badgeRows = Object.entries(s.badges || {}).map(([name, b]) => [name, badge(h, b), b.detail || ""]);
    root.append(card(h, "Driver and enforcement",
      h("p", {}, "Runs of this workspace use the ", h("strong", {}, s.driver), " driver (the service's: ",
        s.service.driver, "). Each control shows how it is held on this host."),
      table(h, "Controls of the driver", ["Control", "Badge", "Condition or gap"], badgeRows, "adm-badges")));

    // ---- network
    const net = parseNetwork(s.network);
    const allowed = new Set(s.network_allowed);
    const modeRadios = MODES.map(([m, label, what]) => {
      const b = s.network_modes[m];
      const r = h("input", { type: "radio", name: "adm-net-default", id: "adm-net-" + m, value: m });
      r.checked = net.mode === m;
      return h("div", { class: "adm-radio" }, r,
        h("label", { for: "adm-net-" + m }, h("strong", {}, label), " — ", what, " ", badge(h, b)),
        b && b.detail ? h("p", { class: "adm-hint" }, b.detail) : null);
    });
    const hostsBox = h("textarea", { id: "adm-hosts", rows: "4", spellcheck: "false", autocomplete: "off",
      "aria-describedby": "adm-hosts-hint" }, s.network_hosts.join("\n"));
    hostsBox.value = s.network_hosts.join("\n");
    const withPkgs = check(h, "adm-hosts-pkgs", "Include the package registries with these hosts", net.withPackages);
    const internetWarn = h("p", { class: "adm-warning", role: "note" },
      "Internet access is permissive: a script can reach any public address and send it whatever it read. " +
      "Prefer Custom hosts where you can.");
    const allowChecks = MODES.map(([m, label]) =>
      check(h, "adm-allow-" + m, label, allowed.has(m), { value: m }));
    const netCard = card(h, "Network",
      h("fieldset", {}, h("legend", {}, "Default policy of runs that name none"), ...modeRadios),
      field(h, "Custom hosts (exact hostnames, one per line)", hostsBox,
        "No wildcards: each name is matched exactly. A run may name only hosts listed here."),
      withPkgs, internetWarn,
      h("fieldset", {}, h("legend", {}, "Modes a run may ask for"), ...allowChecks,
        h("p", { class: "adm-hint" }, "The default policy's mode is always allowed.")));
    root.append(netCard);
    // the default's mode is allowed while it is the default; a mode allowed
    // only because it was the default is no longer once another is chosen
    let forced = null;
    const syncNet = () => {
      const m = netCard.querySelector("input[name=adm-net-default]:checked")?.value;
      if (forced && forced !== m) {
        netCard.querySelector("#adm-allow-" + forced).checked = false;
        forced = null;
      }
      for (const [mode] of MODES) {
        const c = netCard.querySelector("#adm-allow-" + mode);
        if (mode === m && !c.checked) {
          c.checked = true;
          forced = mode;
        }
        c.disabled = mode === m;
      }
      internetWarn.hidden = !(m === "internet" || netCard.querySelector("#adm-allow-internet").checked);
    };
    netCard.addEventListener("change", syncNet);
    syncNet();

    // ---- limits, approvals, tools, retention
    const svc = s.service;
    const drivers = [...new Set([s.service.driver, s.driver, "disabled"])];
    const driverSel = h("select", { id: "adm-driver" }, ...drivers.map((d) => h("option", { value: d },
      d === "disabled" ? "disabled — no code runs in this workspace" : `${d} — the service's sandbox`)));
    driverSel.value = s.driver;
    const limits = card(h, "Limits",
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
          { min: "1", max: "86400" }), "From 1 s to 24 h.")));
    const policySel = h("select", { id: "adm-approval" },
      ...POLICIES.map(([v, t]) => h("option", { value: v }, t)));
    policySel.value = s.approval_policy;
    const approvals = card(h, "Approvals",
      field(h, "Approvals required", policySel),
      field(h, "An approval waits at most (seconds)", num(h, "adm-approval-ttl", s.approval_ttl_s, { min: "1" })),
      check(h, "adm-self-approval", "Let a requester approve their own run (audited)", s.allow_self_approval));
    const tools = card(h, "Tool allow-list",
      h("fieldset", {}, h("legend", {}, "Tools agents may call"),
        ...TOOLS.map(([t, label]) => check(h, "adm-tool-" + t, label, s.tools.includes(t)))));
    const retentionShown = String(Math.round(s.run_retention_s / DAY * 100) / 100);
    const retention = card(h, "Retention",
      field(h, "Keep an ended run's code, output and events (days)",
        num(h, "adm-retention", retentionShown, { min: "1", max: "3650", step: "any" }),
        "From 1 day to 10 years. Audit events are kept regardless."));

    // ---- DLP patterns: rows of name + pattern
    const dlpList = h("div", { class: "adm-dlp-list" });
    const addDlp = (p) => {
      const i = dlpList.children.length;
      const name = h("input", { type: "text", class: "adm-dlp-name", "aria-label": `Pattern ${i + 1} name`,
        value: p.name, maxlength: "40", autocomplete: "off", spellcheck: "false" });
      const pat = h("input", { type: "text", class: "adm-dlp-pattern", "aria-label": `Pattern ${i + 1} regular expression`,
        value: p.pattern, maxlength: "512", autocomplete: "off", spellcheck: "false" });
      name.value = p.name;
      pat.value = p.pattern;
      const row = h("div", { class: "adm-dlp-row" }, name, pat,
        h("button", { type: "button", class: "btn btn-quiet", onclick: () => {
          row.remove();
          dlpList.dispatchEvent(new Event("input", { bubbles: true }));   // a change: old errors go
        } }, `Remove pattern ${i + 1}`));
      dlpList.append(row);
    };
    (s.dlp_patterns || []).forEach(addDlp);
    const dlpError = h("p", { class: "adm-error", role: "alert", id: "adm-dlp-error" });
    const dlp = card(h, "DLP patterns",
      h("p", { class: "adm-hint" }, "Output that matches a pattern (PCRE2, on bytes) is replaced by [REDACTED:name], " +
        "besides the built-in redactions (cloud keys, private keys, tokens, passwords in URLs). " +
        "Names: lowercase letters, digits and _. At most 32 patterns."),
      dlpList,
      h("button", { type: "button", class: "btn btn-quiet", onclick: () => addDlp({ name: "", pattern: "" }) },
        "Add pattern"),
      dlpError);

    const saveBtn = h("button", { type: "submit", class: "btn btn-primary" }, "Save settings");
    const saveError = h("p", { class: "adm-error", role: "alert", id: "adm-save-error" });
    const form = h("form", { class: "adm-form adm-settings-form", novalidate: "" }, netCard, limits, approvals, tools, retention, dlp,
      h("div", { class: "adm-actions" }, saveBtn, saveError));
    root.append(form);

    // an error said about the last attempt goes once the form is changed again
    form.addEventListener("input", () => {
      saveError.textContent = "";
      dlpError.textContent = "";
    });
    const numberOf = (id) => Number(form.querySelector("#" + id).value);
    const collect = () => {
      const errors = [];
      const mode = form.querySelector("input[name=adm-net-default]:checked")?.value || "offline";
      const hosts = lines(hostsBox.value).map((x) => x.toLowerCase());
      for (const x of hosts) if (!HOST_RE.test(x)) errors.push(`"${x}" is not an exact hostname (no wildcards, ports or schemes)`);
      const pk = form.querySelector("#adm-hosts-pkgs").checked;
      let network = mode;
      if (mode === "hosts") {
        if (!hosts.length) errors.push("Custom hosts needs at least one hostname");
        network = (pk ? "hosts+packages:" : "hosts:") + hosts.join(",");
      }
      const allowedNow = MODES.map(([m]) => m).filter((m) => form.querySelector("#adm-allow-" + m).checked || m === mode);
      if (mode === "hosts" && pk && !allowedNow.includes("packages")) allowedNow.push("packages");
      const patterns = [...dlpList.children].map((row) => ({
        name: row.querySelector(".adm-dlp-name").value.trim(),
        pattern: row.querySelector(".adm-dlp-pattern").value,
      }));
      patterns.forEach((p, i) => {
        if (!p.name || !p.pattern) errors.push(`DLP pattern ${i + 1}: both a name and a pattern are needed`);
        else if (!DLP_NAME_RE.test(p.name)) errors.push(`DLP pattern ${i + 1}: the name may use only a-z, 0-9 and _ (at most 40)`);
      });
      const want = {
        driver: driverSel.value, network, network_allowed: allowedNow, network_hosts: hosts,
        sandbox_max_timeout_s: numberOf("adm-sandbox-max"),
        timeout_s: numberOf("adm-timeout"), max_timeout_s: numberOf("adm-max-timeout"),
        memory_mb: numberOf("adm-memory"), cpus: numberOf("adm-cpus"), concurrency: numberOf("adm-concurrency"),
        approval_policy: policySel.value, approval_ttl_s: numberOf("adm-approval-ttl"),
        allow_self_approval: form.querySelector("#adm-self-approval").checked,
        tools: TOOLS.map(([t]) => t).filter((t) => form.querySelector("#adm-tool-" + t).checked),
        // in days on the page: a value not retyped keeps its exact seconds
        run_retention_s: form.querySelector("#adm-retention").value === retentionShown ? s.run_retention_s
          : Math.round(numberOf("adm-retention") * DAY),
        dlp_patterns: patterns,
      };
      for (const [k, v] of Object.entries(want))
        if (typeof v === "number" && !Number.isFinite(v)) errors.push(`${k}: enter a number`);
      // send only what changed, so the audit event names exactly the settings changed
      const patch = {};
      for (const [k, v] of Object.entries(want))
        if (!same(k, v, s[k])) patch[k] = v;
      return { errors, patch };
    };
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      saveError.textContent = "";
      dlpError.textContent = "";
      const { errors, patch } = collect();
      if (errors.length) {
        saveError.textContent = "Not saved: " + errors.join("; ") + ".";
        return;
      }
      if (!Object.keys(patch).length) {
        toast("Nothing changed.", "info");
        return;
      }
      saveBtn.disabled = true;
      try {
        s = await api.patch("/v1/settings", patch);
        toast("Settings saved: " + Object.keys(patch).join(", "), "ok");
        await showChanges();
      } catch (e) {
        const words = "Not saved: " + errWords(e);
        saveError.textContent = words;
        if ("dlp_patterns" in patch && /dlp/i.test(words)) dlpError.textContent = words;
      } finally {
        saveBtn.disabled = false;
      }
    });

    // ---- secrets: write-only
    const secretList = h("ul", { class: "adm-secrets", "aria-label": "Saved secrets" });
    const secretName = h("input", { id: "adm-secret-name", type: "text", maxlength: "64", autocomplete: "off",
      spellcheck: "false" });
    const secretValue = h("input", { id: "adm-secret-value", type: "password", maxlength: "4096",
      autocomplete: "new-password" });
    const secretError = h("p", { class: "adm-error", role: "alert" });
    const patchSecrets = async (change, done) => {
      secretError.textContent = "";
      try {
        s = await api.patch("/v1/settings", { secrets: change });
        drawSecrets();
        toast(done, "ok");
        await showChanges();
      } catch (e) {
        secretError.textContent = "Not saved: " + errWords(e);
      }
    };
    const drawSecrets = () => {
      secretList.replaceChildren(...(s.secrets.length ? s.secrets.map((n) => h("li", {},
        h("code", {}, n), h("span", { class: "adm-hint" }, " value set, never shown"),
        h("button", { type: "button", class: "btn btn-quiet", onclick: () => {
          secretName.value = n;
          secretValue.focus();
        } }, `Replace ${n}`),
        h("button", { type: "button", class: "btn btn-danger", onclick: () =>
          patchSecrets({ [n]: null }, `Secret ${n} deleted.`) }, `Delete ${n}`)))
        : [h("li", { class: "empty" }, "No secrets saved. Add one below: runs read it by name.")]));
    };
    drawSecrets();
    const secretForm = h("form", { class: "adm-inline-form", novalidate: "" },
      field(h, "Secret name", secretName), field(h, "Value", secretValue),
      h("button", { type: "submit", class: "btn btn-primary" }, "Save secret"));
    secretForm.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const n = secretName.value.trim();
      const v = secretValue.value;
      if (!n || !v) {
        secretError.textContent = "Not saved: enter both a name and a value.";
        return;
      }
      // the value leaves the page at once: it is never kept nor shown again
      secretValue.value = "";
      await patchSecrets({ [n]: v }, `Secret ${n} saved.`);
      secretName.value = "";
    });
    root.append(card(h, "Saved secrets",
      h("p", { class: "adm-hint" }, "Write-only: a value is entered or replaced here and never shown back, " +
        "not to admins either."), secretList, secretForm, secretError));

    // ---- recent changes (the audit trail's settings.changed events)
    const changes = h("div", { class: "adm-changes" });
    root.append(card(h, "Recent changes", changes));
    const names = new Map();
    try {
      const p = await api.get("/v1/persons");
      for (const x of p.persons || []) names.set(x.id, x.name);
    } catch { /* an older service: ids are shown */ }
    const showChanges = async () => {
      try {
        const a = await api.get("/v1/audit?kind=settings.changed&limit=10");
        changes.replaceChildren(a.events.length
          ? table(h, "Recent settings changes", ["When", "By", "Settings changed"], a.events.map((e) => [
            when(e.created_at), names.get(e.data.by) || e.data.by || "—",
            (e.data.keys || []).join(", ")]), "adm-changes-table")
          : h("p", { class: "empty" }, "No change yet. Changes appear here and in the audit trail."));
      } catch (e) {
        changes.replaceChildren(h("p", { class: "adm-error" }, "The audit trail could not be read: " + errWords(e)));
      }
    };
    await showChanges();
    status.textContent = "";
  },
};
