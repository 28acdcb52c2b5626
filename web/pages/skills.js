// Skills (#/skills): the bundled skills and the workspace's (GET /v1/skills),
// the test bench (an entrypoint's input_schema as a form, run through POST
// /v1/skills/{name}/test: the same sandbox, allow-list and approval as any
// run; its output and artifacts shown when it ends, its state live from the
// workspace's event stream while it runs) and promotion (admins).
import { artifactsTable } from "../parts.js";
import { card, errWords, when } from "./admin_kit.js";

const LINES_MAX = 1000;   // items of an array-of-strings field (one per line)

// One input of the form for a property of the schema, and how to read it back.
function inputFor(h, key, prop, required, idBase) {
  const id = `${idBase}-${key}`;
  const label = h("label", { for: id }, key + (required ? " (required)" : ""));
  const hint = prop.description ? h("p", { class: "adm-hint", id: id + "-hint" }, prop.description) : null;
  const described = hint ? { "aria-describedby": id + "-hint" } : {};
  let el, read;
  if (Array.isArray(prop.enum)) {
    el = h("select", { id, ...described }, required ? null : h("option", { value: "" }, "(default)"),
      ...prop.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
    read = () => (el.value === "" ? undefined : JSON.parse(el.value));
  } else if (prop.type === "boolean") {
    // three states: a boolean the schema leaves out keeps its default
    el = h("select", { id, ...described }, h("option", { value: "" }, "(default)"),
      h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
    read = () => (el.value === "" ? undefined : el.value === "true");
  } else if (prop.type === "integer" || prop.type === "number") {
    el = h("input", { id, type: "number", step: prop.type === "integer" ? "1" : "any", ...described,
      ...(prop.minimum != null ? { min: String(prop.minimum) } : {}), ...(prop.maximum != null ? { max: String(prop.maximum) } : {}) });
    read = () => (el.value === "" ? undefined : Number(el.value));
  } else if (prop.type === "array" && prop.items && prop.items.type === "string") {
    el = h("textarea", { id, rows: "3", spellcheck: "false", ...described });
    read = () => {
      const v = el.value.split("\n").map((s) => s.trim()).filter(Boolean).slice(0, LINES_MAX);
      return v.length ? v : undefined;
    };
    label.append(" — one per line");
  } else if (prop.type === "string") {
    const long = (prop.maxLength || 0) > 1000;
    el = h(long ? "textarea" : "input", { id, ...(long ? { rows: "6" } : { type: "text" }), spellcheck: "false",
      ...(prop.maxLength ? { maxlength: String(prop.maxLength) } : {}), ...described });
    read = () => (el.value === "" ? undefined : el.value);
  } else {
    // objects and arrays of objects: JSON, checked here and by the API's schema
    el = h("textarea", { id, rows: "4", spellcheck: "false", ...described });
    read = () => {
      if (el.value.trim() === "") return undefined;
      try {
        return JSON.parse(el.value);
      } catch {
        throw new Error(`${key}: enter JSON (${prop.type || "a value"})`);
      }
    };
    label.append(" — JSON");
  }
  if (prop.default !== undefined && el.tagName !== "SELECT") el.placeholder = String(prop.default);
  return { node: h("div", { class: "adm-field" }, label, el, hint), read, required, key };
}

function benchForm(h, skill, ep) {
  const schema = ep.input_schema || {};
  const req = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(([k, p]) =>
    inputFor(h, k, p, req.has(k), `adm-bench-${ep.name}`));
}

function outputOf(h, api, run) {
  const r = run.result;
  const parts = [h("p", {}, h("strong", {}, "State: "), h("span", { class: "adm-run-state" }, run.state),
    r ? ` — exit ${r.exit_code ?? "—"}, ${r.wall_ms} ms` : "", " · ",
    h("a", { href: "#/runs/" + run.id }, "Open the run's page"))];
  if (run.error) parts.push(h("p", { class: "adm-error" }, `${run.error.code}: ${run.error.message}`));
  if (r) {
    parts.push(h("h3", {}, "Output"), h("pre", { class: "output", tabindex: "0", "aria-label": "Standard output" },
      r.stdout || "(no output)"));
    if (r.stderr) parts.push(h("h3", {}, "Errors"), h("pre", { class: "output", tabindex: "0", "aria-label": "Standard error" }, r.stderr));
  }
  // the run page's artifact table: previews (images, CSV, text) and downloads
  if (run.artifacts && run.artifacts.length)
    parts.push(h("h3", {}, "Artifacts"), artifactsTable(api, run.artifacts));
  return parts;
}

// Runs ARGS through the test bench for SKILL's entrypoint EP and shows in
// OUT its state live, its output as written, then the ended run.
async function runTest(ctx, out, skill, ep, args, closers) {
  const { api, h, session } = ctx;
  const live = h("p", { class: "adm-live" }, "Running in a sandbox…");
  const liveOut = h("pre", { class: "output", tabindex: "0", "aria-label": "Output so far" });
  out.replaceChildren(live);
  // the state from the console's one workspace stream (the test call answers
  // only at the end), the output from the run's own stream once its id is known
  let closeOut = null;
  const follow = (id) => {
    if (closeOut) return;
    out.append(liveOut);
    closeOut = api.stream(`/v1/runs/${encodeURIComponent(id)}/events`, (type, d) => {
      if ((type === "stdout" || type === "stderr") && d && typeof d.data === "string" && liveOut.textContent.length < 65536)
        liveOut.append(d.data);
    }, ["stdout", "stderr"]);
    closers.push(closeOut);
  };
  const close = ctx.live ? ctx.live((run) => {
    if (run && run.skill && run.skill.name === skill.name && run.skill.mode === "test" &&
        (!run.requested_by || !session || run.requested_by.id === session.person.id)) {
      live.replaceChildren("Run ", h("a", { href: "#/runs/" + run.id }, run.id), `: ${run.state.replace(/_/g, " ")}…`);
      if (run.state === "running") follow(run.id);
    }
  }) : null;
  if (close) closers.push(close);
  try {
    const run = await api.post(`/v1/skills/${encodeURIComponent(skill.name)}/test`,
      { entrypoint: ep, args, digest: skill.digest });
    out.replaceChildren(...outputOf(h, api, run));
  } catch (e) {
    out.replaceChildren(h("p", { class: "adm-error" }, "The test did not run: " + errWords(e)));
  } finally {
    if (close) close();
    if (closeOut) closeOut();
  }
}

async function promote(ctx, skill) {
  try {
    await ctx.api.post(`/v1/skills/${encodeURIComponent(skill.name)}/promote`, { digest: skill.digest });
    ctx.toast(`${skill.name} ${skill.version} promoted: agents run this version now.`, "ok");
    ctx.go("#/skills");
  } catch (e) {
    ctx.toast("Not promoted: " + errWords(e), "error");
  }
}

// The bench in BOX for SKILL; VERSIONS (a workspace skill's, newest first)
// offers the others, so an upload is tested (and promoted) before agents run it.
function openBench(ctx, box, skill, versions, closers, isAdmin) {
  const { h } = ctx;
  const epSel = h("select", { id: "adm-bench-ep" }, ...skill.entrypoints.map((e) => h("option", { value: e.name }, e.name)));
  const fields = h("div", { class: "adm-bench-fields" });
  const out = h("div", { class: "adm-bench-out", "aria-live": "polite" });
  const err = h("p", { class: "adm-error", role: "alert" });
  const runBtn = h("button", { type: "submit", class: "btn btn-primary" }, "Run test");
  let inputs = [];
  const drawFields = () => {
    const ep = skill.entrypoints.find((e) => e.name === epSel.value);
    inputs = benchForm(h, skill, ep);
    fields.replaceChildren(h("p", { class: "adm-hint" }, `${ep.language} · ${ep.script} — ${ep.description}`),
      ...(inputs.length ? inputs.map((i) => i.node) : [h("p", {}, "This entrypoint takes no input.")]));
  };
  epSel.addEventListener("change", drawFields);
  let versionField = null;
  if (versions && versions.length > 1) {
    const sel = h("select", { id: "adm-bench-version" }, ...versions.map((v) => h("option", { value: v.digest },
      `${v.version} — ${v.state === "promoted" ? "promoted" : "not promoted"}, uploaded ${when(v.uploaded_at)}`)));
    sel.value = skill.digest;
    sel.addEventListener("change", () =>
      openBench(ctx, box, versions.find((v) => v.digest === sel.value), versions, closers, isAdmin));
    versionField = h("div", { class: "adm-field" }, h("label", { for: "adm-bench-version" }, "Version"), sel);
  }
  const form = h("form", { class: "adm-form", novalidate: "" }, versionField,
    h("div", { class: "adm-field" }, h("label", { for: "adm-bench-ep" }, "Entrypoint"), epSel), fields,
    h("div", { class: "adm-actions" }, runBtn,
      isAdmin && skill.source === "workspace" && skill.state === "uploaded"
        ? h("button", { type: "button", class: "btn", "aria-label": `Promote ${skill.name} ${skill.version}`,
          onclick: () => promote(ctx, skill) }, "Promote this version") : null), err);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    const args = {};
    try {
      for (const i of inputs) {
        const v = i.read();
        if (v === undefined) {
          if (i.required) throw new Error(`${i.key} is required`);
        } else args[i.key] = v;
      }
    } catch (e) {
      err.textContent = "Not run: " + errWords(e) + ".";
      return;
    }
    runBtn.disabled = true;
    await runTest(ctx, out, skill, epSel.value, args, closers);
    runBtn.disabled = false;
  });
  box.replaceChildren(h("h3", {}, `${skill.name} ${skill.version}`),
    h("p", { class: "adm-hint" }, "Digest ", h("code", { class: "adm-hash" }, skill.digest),
      ". The bench runs this version in the same sandbox as agents' runs, under the workspace's allow-list and approval policy."),
    form, out);
  drawFields();
  box.scrollIntoView({ block: "start" });
  epSel.focus();
}

export default {
  path: "#/skills",
  title: "Skills",
  nav: true,
  roles: null,
  render: async (root, ctx) => {
    const { api, h, session } = ctx;
    const isAdmin = session && session.person && session.person.role === "admin";
    root.classList.add("adm-page");
    root.replaceChildren(h("h1", {}, "Skills"));
    let skills;
    try {
      skills = (await api.get("/v1/skills")).skills;
    } catch (e) {
      root.append(h("p", { class: "adm-error", role: "alert" }, "The skills could not be read: " + errWords(e)));
      return;
    }
    const closers = [];
    const bench = h("div", { class: "adm-bench" },
      h("p", { class: "empty" }, "Choose Test beside a skill to fill its input form and run it."));
    const test = async (s) => {
      let versions = null;
      if (s.source === "workspace") {
        try {
          versions = (await api.get(`/v1/skills/${encodeURIComponent(s.name)}`)).versions || null;
        } catch { /* the version listed is tested */ }
      }
      // the newest upload first: what an admin tests before promoting it
      openBench(ctx, bench, versions && versions.length ? versions[0] : s, versions, closers, isAdmin);
    };
    // one card per skill (a table's description column squeezes to nothing on a phone)
    const item = (s) => h("li", { class: "adm-skill" },
      h("div", { class: "adm-skill-head" }, h("h3", {}, s.name),
        h("span", { class: "muted" }, `${s.version} · ${s.source === "bundled" ? "bundled" : "workspace"}`),
        s.source === "workspace" ? h("span", { class: "badge " + (s.state === "uploaded" ? "badge-warn" : "badge-ok") },
          s.state === "uploaded" ? "Not promoted" : "Promoted") : null),
      h("p", {}, s.description),
      h("p", { class: "adm-hint" }, "Entrypoints: " + s.entrypoints.map((e) => `${e.name} (${e.language})`).join(", ")),
      h("div", { class: "adm-row-actions" },
        h("button", { type: "button", class: "btn", "aria-label": `Test ${s.name}`, onclick: () => test(s) }, "Test"),
        isAdmin && s.source === "workspace" && s.state === "uploaded"
          ? h("button", { type: "button", class: "btn btn-primary", "aria-label": `Promote ${s.name}`,
            onclick: () => promote(ctx, s) }, "Promote") : null));
    const ours = skills.filter((s) => s.source === "workspace");
    const bundled = skills.filter((s) => s.source !== "workspace");
    root.append(card(h, "The workspace's skills",
      ours.length ? h("ul", { class: "adm-skills", "aria-label": "The workspace's skills" }, ...ours.map(item))
        : h("p", { class: "empty" }, "None yet. Upload one with POST /v1/skills (a tar of its directory: skill.json and " +
          "its scripts); test it here, then an admin promotes it for agents.")),
    card(h, "Bundled skills", h("ul", { class: "adm-skills", "aria-label": "Bundled skills" }, ...bundled.map(item))),
    card(h, "Test bench", bench));
    return () => closers.forEach((c) => c());
  },
};
