// The console's shell: the session, the layout (header with the workspace,
// the person and their role, the pending approvals' count, Sign out; the
// nav, a menu button at phone width), the hash router and the context each
// page is given (the page interface: docs/api.md, "The console").
import { makeApi } from "./api.js";
import { h, clear } from "./dom.js";
import pages from "./pages/index.js";
import signin from "./signin.js";

const state = {
  session: null,
  cleanup: null,       // the current page's
  seq: 0,              // which render is current (a slow page left behind renders nothing)
  pending: new Set(),  // ids of the workspace's runs awaiting approval
  pendingMore: false,  // more than one page of them
  listeners: new Set(),
  streamState: "closed",
};

const api = makeApi(() => state.session && state.session.csrf_token, () => signedOut());

// --- toasts -------------------------------------------------------------

export function toast(message, kind = "info") {
  const box = document.getElementById("toasts");
  const el = h("div", { class: `toast toast-${kind}`, role: kind === "error" ? "alert" : null }, message);
  box.appendChild(el);
  setTimeout(() => el.remove(), kind === "error" ? 9000 : 4000);
}

function go(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// --- the workspace's live runs: one stream for the whole console ----------

// Pages subscribe with ctx.live(fn): fn(run) for every run of the workspace
// created or changed (GET /v1/events' entries; whole entries, so applying
// one twice is harmless). One stream per tab, however many pages use it:
// the service caps a person's streams.
function live(fn) {
  state.listeners.add(fn);
  return () => state.listeners.delete(fn);
}

let closeStream = null;
function startStream() {
  if (closeStream) return;
  closeStream = api.stream("/v1/events", (type, run) => {
    if (!run || !run.id) return;
    if (run.state === "pending_approval") state.pending.add(run.id);
    else state.pending.delete(run.id);
    renderPending();
    for (const fn of state.listeners) {
      try { fn(run); } catch (e) { console.error(e); }
    }
  }, ["run"], (s) => {
    const was = state.streamState;
    state.streamState = s;
    const dot = document.getElementById("live-dot");
    if (dot) {
      dot.className = `live-dot live-${s}`;
      dot.title = s === "open" ? "Live: runs update as they change" : "Reconnecting to live updates…";
      dot.setAttribute("aria-label", dot.title);
    }
    // back after a drop: what changed meanwhile is read again
    if (s === "open" && was === "retry") { refreshPending(); for (const fn of state.listeners) fn(null); }
  });
}

async function refreshPending() {
  try {
    const doc = await api.get("/v1/runs?state=pending_approval&limit=200");
    state.pending = new Set(doc.runs.map((r) => r.id));
    state.pendingMore = !!doc.next_cursor;
  } catch { /* the header keeps its last count */ }
  renderPending();
}

function renderPending() {
  const el = document.getElementById("pending-count");
  if (!el) return;
  const n = state.pending.size;
  const text = `${n}${state.pendingMore ? "+" : ""}`;
  el.querySelector(".count").textContent = text;
  el.setAttribute("aria-label", `${text} pending approval${n === 1 ? "" : "s"}`);
  el.classList.toggle("has-pending", n > 0);
}

// --- layout -------------------------------------------------------------

function visible(page) {
  return !page.roles || page.roles.includes(state.session.person.role);
}

function layout() {
  const s = state.session;
  const app = document.getElementById("app");
  clear(app);
  const nav = h("nav", { id: "nav", class: "nav", "aria-label": "Console" },
    h("ul", {}, pages.filter((p) => p.nav && visible(p)).map((p) =>
      h("li", {}, h("a", { href: p.path, "data-path": p.path }, p.title)))));
  const menu = h("button", {
    class: "menu-button", type: "button", "aria-expanded": "false", "aria-controls": "nav",
    onclick: () => {
      const open = !document.body.classList.contains("nav-open");
      document.body.classList.toggle("nav-open", open);
      menu.setAttribute("aria-expanded", String(open));
    },
  }, h("span", { class: "menu-icon", "aria-hidden": "true" }), "Menu");
  const header = h("header", { class: "top" },
    menu,
    h("a", { class: "brand", href: "#/activity" }, h("span", { class: "brand-mark", "aria-hidden": "true" }), "airlock"),
    h("span", { class: "workspace", title: `Organisation ${s.org ? s.org.name : ""}` },
      s.workspace ? s.workspace.name : ""),
    h("span", { class: "spacer" }),
    h("span", { id: "live-dot", class: "live-dot live-closed", role: "img", "aria-label": "Connecting to live updates" }),
    h("a", { id: "pending-count", class: "pending", href: "#/approvals" },
      h("span", { class: "count" }, "0"), h("span", { class: "pending-label" }, " pending")),
    h("span", { class: "who" },
      h("span", { class: "who-name" }, s.person.name),
      h("span", { class: `role role-${s.person.role}` }, s.person.role)),
    s.via === "session" ? h("button", { type: "button", class: "btn btn-quiet", onclick: signOut }, "Sign out") : null);
  app.append(header, h("div", { class: "body" }, nav, h("main", { id: "main", tabindex: "-1" })));
  // Escape closes the phone-width menu and gives focus back to its button
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || !document.body.classList.contains("nav-open")) return;
    document.body.classList.remove("nav-open");
    menu.setAttribute("aria-expanded", "false");
    menu.focus();
  });
  app.removeAttribute("aria-busy");
  renderPending();
}

async function signOut() {
  try {
    await api.del("/v1/session");
  } catch (e) {
    toast(e.message, "error");
    return;
  }
  if (closeStream) closeStream();
  state.session = null;
  location.replace("/login#signed-out");
}

function signedOut() {
  if (!state.session) return;
  state.session = null;
  if (closeStream) { closeStream(); closeStream = null; }
  location.replace("/login#expired");
}

// --- routing ------------------------------------------------------------

// "#/runs/run_1" against "#/runs/{id}": the params, else null
function match(pattern, hash) {
  const want = pattern.split("/"), got = hash.split("?")[0].split("/");
  if (want.length !== got.length) return null;
  const params = {};
  for (let i = 0; i < want.length; i++) {
    const m = /^\{(\w+)\}$/.exec(want[i]);
    if (m) {
      // a malformed escape (a crafted link's "%E0") is no page, not a crash
      try { params[m[1]] = decodeURIComponent(got[i]); } catch { return null; }
    }
    else if (want[i] !== got[i]) return null;
  }
  return params;
}

function query(hash) {
  const q = hash.indexOf("?");
  return new URLSearchParams(q < 0 ? "" : hash.slice(q + 1));
}

async function route() {
  if (!state.session) return;
  const hash = location.hash || "#/activity";
  if (!location.hash) { location.replace("#/activity"); return; }
  document.body.classList.remove("nav-open");
  const mb = document.querySelector(".menu-button");
  if (mb) mb.setAttribute("aria-expanded", "false");
  let page = null, params = null;
  for (const p of pages) {
    params = match(p.path, hash);
    if (params) { page = p; break; }
  }
  if (state.cleanup) { try { state.cleanup(); } catch (e) { console.error(e); } state.cleanup = null; }
  const main = document.getElementById("main");
  clear(main);
  for (const a of document.querySelectorAll("#nav a")) {
    const on = page && (a.dataset.path === page.path || (page.section && a.dataset.path === page.section));
    if (on) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const seq = ++state.seq;
  if (!page) {
    document.title = "Not found · airlock";
    main.append(h("h1", {}, "No such page"), h("p", { class: "empty" }, "This address is not a page of the console. ",
      h("a", { href: "#/activity" }, "Go to Activity"), "."));
    return;
  }
  document.title = `${page.title} · airlock`;
  if (!visible(page)) {
    main.append(h("h1", {}, page.title), h("p", { class: "empty" },
      `This page is for ${page.roles.join(" or ")}s; you are signed in as ${state.session.person.role}.`));
    return;
  }
  const root = h("div", { class: "page" });
  main.append(root);
  // after a navigation (not the first page), focus goes to the new page
  if (seq > 1) { window.scrollTo(0, 0); main.focus({ preventScroll: true }); }
  const ctx = {
    api, session: state.session, params, query: query(hash), h, go, toast, live,
    // whether this render is still the page shown (a page checks it after an await)
    current: () => seq === state.seq,
    pendingChanged: refreshPending,
  };
  try {
    const cleanup = await page.render(root, ctx);
    if (seq !== state.seq) { if (typeof cleanup === "function") cleanup(); return; }
    state.cleanup = typeof cleanup === "function" ? cleanup : null;
  } catch (e) {
    if (seq !== state.seq) return;
    root.append(h("div", { class: "alert alert-error", role: "alert" }, e.message || String(e)));
  }
}

// --- start --------------------------------------------------------------

async function start() {
  const app = document.getElementById("app");
  if (location.pathname === "/login") {
    await signin(app, { api, h, toast });
    return;
  }
  try {
    state.session = await api.get("/v1/session");
  } catch (e) {
    if (e.status === 401) { location.replace("/login"); return; }
    clear(app);
    app.removeAttribute("aria-busy");
    app.append(h("main", { id: "main", class: "center" }, h("div", { class: "card narrow" },
      h("h1", {}, "The console could not start"), h("p", {}, e.message))));
    return;
  }
  layout();
  // the skip link moves focus without touching the hash (the router's)
  document.querySelector(".skip").addEventListener("click", (e) => {
    e.preventDefault();
    document.getElementById("main").focus();
  });
  refreshPending();
  startStream();
  window.addEventListener("hashchange", route);
  route();
}

start();
