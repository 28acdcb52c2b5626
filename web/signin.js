// The sign-in page (/login): a login link is /login#token=TOKEN (in the
// fragment, so no server or proxy log sees it). The token is taken out of
// the address bar before anything else, then redeemed once with
// POST /v1/session, which sets the session cookie.
import { clear } from "./dom.js";

const HOW = "airlock admin login-link --person YOUR_PERSON_ID";

export default async function signin(app, { api, h }) {
  const frag = new URLSearchParams(location.hash.slice(1));
  const token = frag.get("token");
  const reason = location.hash === "#expired" ? "expired" : location.hash === "#signed-out" ? "out" : null;
  // the token leaves the address bar (and the history) at once
  history.replaceState(null, "", "/login");
  document.title = "Sign in · airlock";
  const card = h("div", { class: "card narrow signin" });
  clear(app);
  app.removeAttribute("aria-busy");
  app.append(h("main", { id: "main", class: "center" },
    h("div", { class: "signin-brand" }, h("span", { class: "brand-mark", "aria-hidden": "true" }), "airlock"),
    card));

  const howTo = () => [
    h("p", {}, "Ask an administrator of your workspace for a sign-in link; they make one with:"),
    h("pre", { class: "snippet", tabindex: "0", "aria-label": "Command for a new link" }, h("code", {}, HOW)),
    h("p", { class: "muted" }, "A link signs you in once and is valid for 15 minutes."),
  ];

  if (!token) {
    // already signed in (a bookmark of /login): straight to the console
    if (!reason) {
      const signedIn = await api.get("/v1/session").then(() => true, () => false);
      if (signedIn) { location.replace("/#/activity"); return; }
    }
    card.append(h("h1", {}, reason === "out" ? "You are signed out" : reason === "expired" ? "Your session has ended" : "Sign in"),
      ...howTo());
    return;
  }
  // Already signed in: a link someone else sent (their own, for their
  // workspace) would otherwise switch this browser to their session without
  // a word, and what the person then typed (a secret in Settings, a key's
  // name, an approval) would go to that workspace. Asked first.
  const current = await api.get("/v1/session").catch(() => null);
  if (current && current.person) {
    const choice = await new Promise((resolve) => {
      const name = current.person.name, ws = current.workspace ? current.workspace.name : "your workspace";
      card.append(h("h1", {}, "You are already signed in"),
        h("p", {}, `You are signed in as ${name} in ${ws}. This link signs this browser in as the person it was made for, who may be someone else in another workspace.`),
        h("p", {}, "Use it only if you asked for it."),
        h("div", { class: "actions" },
          h("button", { type: "button", class: "btn btn-primary", onclick: () => resolve(true) }, "Sign in with this link"),
          h("button", { type: "button", class: "btn", onclick: () => resolve(false) }, `Stay signed in as ${name}`)));
    });
    if (!choice) { location.replace("/#/activity"); return; }
    clear(card);
  }
  card.append(h("h1", {}, "Signing you in…"), h("p", { class: "muted", role: "status" }, "Checking your link."));
  try {
    await api.post("/v1/session", { token });
  } catch (e) {
    clear(card);
    card.append(h("h1", {}, "This sign-in link cannot be used"),
      h("div", { class: "alert alert-error", role: "alert" }, e.message),
      // the API's words say what to run when it knows (a used or expired link)
      ...(e.message.includes("login-link") ? [h("p", { class: "muted" }, "A link works once and for 15 minutes.")]
        : [h("p", {}, "A link works once and for 15 minutes. Ask for a new one; an administrator runs:"),
          h("pre", { class: "snippet", tabindex: "0", "aria-label": "Command for a new link" }, h("code", {}, HOW))]));
    return;
  }
  location.replace("/#/activity");
}
