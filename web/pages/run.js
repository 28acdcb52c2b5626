// A run's page (#/runs/ID): the trace a person reads. The code with line
// numbers and highlighting, its input manifest, its output (streamed live
// through GET /v1/runs/{id}/events while it runs, complete after), timing,
// limits, image, driver and its control badges, network policy and egress,
// the approval and who decided it, its packages (what it asked, what its
// install made or reused, the installer's output), artifacts with previews,
// audit events.
import { h, badge, fmtTime, fmtMs, fmtBytes, runDuration, VIA_LABEL, revealNodes, describe, who } from "../dom.js";
import { codeView } from "../code.js";
import { manifest, controlsTable, artifactsTable, auditTable, hasPackages, packagesPlanned, packagesInstalled } from "../parts.js";

// a limit in words: its name and its value with its unit
const LIMIT = {
  timeout_s: ["Wall clock", (v) => `${v} s`], memory_mb: ["Memory", (v) => `${v} MiB`],
  cpus: ["CPUs", (v) => String(v)], pids: ["Processes", (v) => String(v)],
};
const STREAM_MAX = 2 * 1024 * 1024;
const INSTALL_MAX = 1024 * 1024;   // what the service keeps of an install's output
const ENDED = new Set(["succeeded", "failed", "timed_out", "killed", "canceled", "error", "denied"]);

function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(Boolean).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")]));
}

function card(title, ...body) {
  return h("section", { class: "card", "aria-label": title }, h("h2", {}, title), ...body);
}

function egressTable(net) {
  const rows = (net && net.egress) || [];
  const parts = [kv([["Policy", h("code", {}, (net && net.policy) || "—")], net && net.mode ? ["Mode", net.mode] : null,
    net && net.egress_dropped ? ["Not logged", `${net.egress_dropped} more connections`] : null])];
  if (!rows.length) parts.push(h("p", { class: "muted" }, "No connection left the box."));
  else parts.push(h("div", { class: "table-wrap", tabindex: "0" }, h("table", {},
    h("thead", {}, h("tr", {}, ["Host", "Port", "Decision", "Bytes sent", "Bytes received"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rows.map((e) => h("tr", {},
      h("td", { class: "mono" }, e.host || "—"), h("td", { class: "num" }, e.port ?? "—"),
      h("td", {}, badge(e.decision, e.decision === "allowed" ? "ok" : "bad")),
      h("td", { class: "num" }, fmtBytes(e.bytes_up)), h("td", { class: "num" }, fmtBytes(e.bytes_down))))))));
  return parts;
}

function approvalBlock(ap, names) {
  if (!ap) return h("p", { class: "muted" }, "This run needed no approval.");
  const who = ap.decided_by ? (names.get(ap.decided_by) || ap.decided_by) : null;
  return kv([
    ["Decision", ap.decision ? badge(ap.decision, ap.decision === "approved" ? "ok" : ap.decision === "pending" ? "warn" : "bad") : badge("pending", "warn")],
    who ? ["Decided by", who] : null,
    ap.decided_at ? ["Decided", fmtTime(ap.decided_at)] : null,
    ap.reason ? ["Reason", ap.reason] : null,
    ap.risk ? ["Risk", ap.risk] : null,
    ["Requested", fmtTime(ap.requested_at)],
    ap.expires_at ? ["Expires", fmtTime(ap.expires_at)] : null,
    ap.hash ? ["Hash", h("code", { title: ap.hash }, ap.hash.slice(0, 16) + "…")] : null,
  ]);
}

export default {
  path: "#/runs/{id}",
  title: "Run",
  nav: false,
  roles: null,
  section: "#/activity",
  async render(root, ctx) {
    const { api, params } = ctx;
    const id = params.id;
    let run;
    try {
      run = await api.get(`/v1/runs/${encodeURIComponent(id)}`);
    } catch (e) {
      root.append(h("h1", {}, "Run"), h("div", { class: "alert alert-error", role: "alert" }, e.message),
        h("p", {}, h("a", { href: "#/activity" }, "Back to Activity")));
      return;
    }
    if (!ctx.current()) return;
    const [trace, audit, persons] = await Promise.all([
      api.get(`/v1/runs/${encodeURIComponent(id)}/trace`).catch(() => null),
      api.get(`/v1/audit?run_id=${encodeURIComponent(id)}&limit=200`).then((d) => d.events.slice().reverse()).catch((e) => e),
      api.get("/v1/persons").then((d) => d.persons).catch(() => []),
    ]);
    if (!ctx.current()) return;
    const names = new Map(persons.map((p) => [p.id, p.name]));
    document.title = `Run ${id} · airlock`;

    const stateEl = h("span", {}, badge(run.state));
    const out = h("pre", { class: "output", tabindex: "0", "aria-label": "Output", "aria-live": "off" });
    const outNote = h("p", { class: "muted", role: "status" });
    const overview = h("div", {});
    const resultBox = h("div", {});
    const artsBox = h("div", {});
    // the packages: what is asked, what the install made, pip's and npm's output
    const pkgCard = h("section", { class: "card", "aria-label": "Packages", hidden: true });
    const installOut = h("pre", { class: "output", tabindex: "0", "aria-label": "Install output", "aria-live": "off", hidden: true });
    let phase = null, installShown = 0;

    const cancel = h("button", { type: "button", class: "btn btn-danger", onclick: async () => {
      cancel.disabled = true;
      try { await api.post(`/v1/runs/${encodeURIComponent(id)}/cancel`); ctx.toast("Run canceled.", "ok"); }
      catch (e) { ctx.toast(e.message, "error"); cancel.disabled = false; }
    } }, "Cancel run");

    function drawOverview() {
      const r = run.result || {};
      const box = r.box || {};
      overview.replaceChildren(kv([
        ["State", stateEl],
        ["Requested by", who(run.requested_by, true)],
        ["Interface", run.via ? (VIA_LABEL[run.via] || run.via) + (run.skill ? ` · skill ${run.skill}` : "") : "—"],
        ["Language", run.language],
        ["Thread", run.thread_id ? h("a", { href: `#/threads/${encodeURIComponent(run.thread_id)}`, class: "mono" }, run.thread_id) : "—"],
        ["Created", fmtTime(run.created_at)],
        ["Started", fmtTime(run.started_at)],
        ["Finished", fmtTime(run.finished_at)],
        ["Duration", runDuration(run)],
        ["Exit code", r.exit_code ?? (r.signal ? `signal ${r.signal}` : "—")],
        r.reason ? ["Reason", r.reason] : null,
        ["CPU", fmtMs(r.cpu_ms)],
        ["Peak memory", fmtBytes(r.peak_memory_bytes)],
        ["Credits", run.credits ?? run.price ?? "—"],
        ["Image", h("code", { title: run.image || "" }, run.image || "—")],
        ["Driver", box.driver ? `${box.driver}${box.runtime ? ` (${box.runtime})` : ""}${box.warm ? ", warm" : ""}` : "—"],
        run.error ? ["Error", `${run.error.code}: ${run.error.message}`] : null,
      ]));
      cancel.hidden = ENDED.has(run.state);
    }

    function drawResult() {
      const r = run.result || {};
      resultBox.replaceChildren(
        card("Limits", kv(Object.entries(run.limits || {}).map(([k, v]) => LIMIT[k] ? [LIMIT[k][0], LIMIT[k][1](v)] : [k.replace(/_/g, " "), String(v)]))),
        card("Controls", controlsTable(r.controls)),
        card("Network", ...egressTable(r.network || { policy: run.network })));
      const arts = run.artifacts || [];
      const previews = run.previews || [];
      artsBox.replaceChildren(card("Artifacts",
        arts.length ? artifactsTable(api, arts) : h("p", { class: "muted" }, ENDED.has(run.state) ? "This run wrote no artifacts under /out." : "Artifacts appear when the run ends."),
        previews.length ? h("div", { class: "grid" }, previews.map((p) => h("figure", {},
          p.content_type && p.content_type.startsWith("image/") && p.content_base64
            ? h("img", { class: "preview-img", src: `data:${p.content_type};base64,${p.content_base64}`, alt: `Preview ${p.path}` })
            : h("p", { class: "muted" }, p.path),
          h("figcaption", { class: "muted" }, p.path)))) : null,
        (run.skipped || []).length ? h("p", { class: "muted" }, `Not kept: ${run.skipped.map((s) => `${s.path} (${s.why})`).join("; ")}`) : null));
    }

    function drawPackages() {
      const r = run.result || {};
      const ap = run.approval || {};
      const planned = ap.packages && hasPackages(ap.packages) ? packagesPlanned(ap.packages)
        : hasPackages(run.packages) ? packagesPlanned(run.packages, run.packages) : null;
      const res = r.packages && typeof r.packages === "object" ? r.packages : null;
      const failed = r.reason === "install_failed";
      if (!planned && !res && !failed && !phase && !installShown) { pkgCard.hidden = true; return; }
      let state;
      if (failed) state = h("div", { class: "alert alert-error" }, "The install failed, so the run never started",
        r.error && r.error.message ? `: ${r.error.message}` : ".");
      else if (res) state = packagesInstalled(res);
      else if (phase === "installing" && !ENDED.has(run.state)) state = h("p", { role: "status" }, "Installing…");
      else if (ENDED.has(run.state)) state = h("p", { class: "muted" }, "Not installed: the run ended before its install.");
      else state = h("p", { class: "muted" }, "Installed before the run starts.");
      installOut.hidden = !installShown;
      pkgCard.hidden = false;
      // (replaceChildren takes nodes, not lists: flattened, the absent left out)
      pkgCard.replaceChildren(...[h("h2", {}, "Packages"),
        planned ? [h("h3", { class: "inputs-title" }, "Asked"), planned] : null,
        h("h3", { class: "inputs-title" }, "Installed"), state,
        installShown ? h("h3", { class: "inputs-title" }, "Install output") : null, installOut].flat().filter(Boolean));
    }

    function installing(data) {
      const text = String((data && data.data) || "");
      if (installShown >= INSTALL_MAX) return;
      installShown += text.length || 0;
      if (!text) return;
      installOut.append(...(data.stream === "stderr" ? [h("span", { class: "err" }, revealNodes(text))] : revealNodes(text)));
    }

    function drawOutput(r) {
      out.replaceChildren();
      if (r.stdout) out.append(...revealNodes(r.stdout));
      if (r.stderr) out.append(h("span", { class: "err" }, revealNodes(r.stderr)));
      if (!r.stdout && !r.stderr) out.append(h("span", { class: "muted" }, "(no output)"));
      const cut = [r.stdout_truncated && "stdout", r.stderr_truncated && "stderr"].filter(Boolean);
      outNote.textContent = cut.length ? `Output cut at the limit: ${cut.join(" and ")}.` : "Complete output.";
    }

    const input = (trace && trace.input) || {};
    const inputs = run.approval && run.approval.inputs;
    root.append(
      h("div", { class: "page-head" },
        h("div", {}, h("h1", {}, "Run ", h("span", { class: "mono" }, id)),
          h("p", { title: run.description || "" }, describe(run.description) || "No description was given.")),
        h("div", { class: "actions" },
          run.state === "pending_approval" ? h("a", { class: "btn btn-primary", href: "#/approvals" }, "Review in Approvals") : null,
          cancel)),
      h("div", { class: "grid" }, card("Overview", overview), card("Approval", approvalBlock(run.approval, names))),
      card("Code", codeView(run.code || input.code || "", run.language, `Code of run ${id}`)),
      card("Inputs", ...manifest(inputs, input.artifacts, run.imports)),
      pkgCard,
      card("Output", out, outNote),
      resultBox, artsBox,
      card("Audit events", audit instanceof Error ? h("p", { class: "alert alert-error" }, audit.message) : auditTable(audit, names)));
    drawOverview();
    drawResult();
    drawPackages();

    let close = null;
    if (ENDED.has(run.state)) {
      drawOutput(run.result || {});
      // the install's output is in the run's events alone: read them once
      // when there was an install (a reused layer had none)
      const r = run.result || {};
      if ((r.packages && !r.packages.reused) || r.reason === "install_failed") {
        close = api.stream(`/v1/runs/${encodeURIComponent(id)}/events`, (type, data) => {
          if (type === "installing") { installing(data); if (installOut.hidden) drawPackages(); }
          else if (type === "result" && close) { close(); close = null; }
        }, ["installing", "result"]);
      }
    } else {
      out.replaceChildren();
      outNote.textContent = run.state === "pending_approval" ? "Waiting for approval: output appears when it runs." : "Streaming live…";
      let started = false, shown = 0;
      close = api.stream(`/v1/runs/${encodeURIComponent(id)}/events`, (type, data) => {
        if (type === "stdout" || type === "stderr") {
          if (!started) { out.replaceChildren(); started = true; }
          const text = data.data || "";
          // while it streams the page shows the first 2 MiB; the whole
          // output (as the service kept it) is drawn when the run ends
          shown += text.length;
          if (shown > STREAM_MAX) {
            outNote.textContent = "Streaming live… (more output than the page shows while it runs: all of it when the run ends)";
            return;
          }
          out.append(...(type === "stderr" ? [h("span", { class: "err" }, revealNodes(text))] : revealNodes(text)));
          out.scrollTop = out.scrollHeight;
          outNote.textContent = "Streaming live…";
        } else if (type === "phase") {
          phase = data.phase || null;
          drawPackages();
        } else if (type === "installing") {
          installing(data);
          if (installOut.hidden) drawPackages();
        } else if (type === "installed") {
          // what the result will say too: shown as soon as the layer is there
          run.result = { ...(run.result || {}), packages: { layer: data.layer, reused: data.reused, install_ms: data.ms,
            python: data.python, node: data.node } };
          phase = null;
          drawPackages();
        } else if (type === "state") {
          run.state = data.state;
          stateEl.replaceChildren(badge(run.state));
          if (run.state === "running" && !started) outNote.textContent = "Running: streaming live…";
          drawOverview();
        } else if (type === "result") {
          run = data;
          stateEl.replaceChildren(badge(run.state));
          drawOverview();
          drawResult();
          drawOutput(run.result || {});
          drawPackages();
          if (close) { close(); close = null; }
          // the audit of its end
          api.get(`/v1/audit?run_id=${encodeURIComponent(id)}&limit=200`).then((d) => {
            const sec = root.querySelector('section[aria-label="Audit events"]');
            if (sec && ctx.current()) sec.replaceChildren(h("h2", {}, "Audit events"), auditTable(d.events.slice().reverse(), names));
          }).catch(() => {});
        }
      }, ["state", "stdout", "stderr", "result", "approval", "phase", "installing", "installed"]);
    }
    const tick = setInterval(() => { if (run.state === "running") drawOverview(); }, 1000);
    return () => { if (close) close(); clearInterval(tick); };
  },
};
