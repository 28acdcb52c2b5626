// Keys (#/keys): API keys for agents. One's own are created here with a
// name (POST /v1/keys; the secret is in that one answer only, shown once
// with a copy button), listed by name (GET /v1/keys: one's own, an admin
// sees the workspace's) and revoked (DELETE /v1/keys/{id}).
import { card, errWords, table, when } from "./admin_kit.js";

const NAME_RE = /^[\x20-\x7e]{1,64}$/;   // the API's rule: 1-64 printable characters

export default {
  path: "#/keys",
  title: "Keys",
  nav: true,
  roles: null,
  render: async (root, ctx) => {
    const { api, h, toast, session } = ctx;
    const isAdmin = session && session.person && session.person.role === "admin";
    root.classList.add("adm-page");
    root.replaceChildren(h("h1", {}, "API keys"));

    const name = h("input", { id: "adm-key-name", type: "text", maxlength: "64", autocomplete: "off",
      spellcheck: "false", placeholder: "ci-agent", "aria-describedby": "adm-key-name-hint" });
    const createErr = h("p", { class: "adm-error", role: "alert" });
    const shown = h("div", { class: "adm-secret-once", "aria-live": "polite" });
    const form = h("form", { class: "adm-inline-form", novalidate: "" },
      h("div", { class: "adm-field" }, h("label", { for: "adm-key-name" }, "Key name"), name,
        h("p", { class: "adm-hint", id: "adm-key-name-hint" }, "What the key is for, e.g. the agent or pipeline that uses it.")),
      h("button", { type: "submit", class: "btn btn-primary" }, "Create key"));
    root.append(card(h, "Create a key", form, createErr, shown));

    const list = h("div", { class: "adm-keys" });
    const listErr = h("p", { class: "adm-error", role: "alert" });
    root.append(card(h, isAdmin ? "The workspace's keys" : "Your keys", listErr, list));

    const load = async () => {
      listErr.textContent = "";
      let keys;
      try {
        keys = (await api.get("/v1/keys")).keys;
      } catch (e) {
        listErr.textContent = "The keys could not be read: " + errWords(e);
        return;
      }
      keys.sort((a, b) => a.name.localeCompare(b.name) || String(a.created_at).localeCompare(String(b.created_at)));
      list.replaceChildren(keys.length ? table(h, "API keys by name",
        ["Name", "Starts with", "Person", "Created", "Last used", "State", "Action"],
        keys.map((k) => [k.name, k.prefix ? h("code", {}, k.prefix + "…") : "—", k.person ? k.person.name : "—", when(k.created_at), when(k.last_used_at),
          k.revoked_at ? h("span", { class: "badge badge-bad" }, "Revoked " + when(k.revoked_at))
            : h("span", { class: "badge badge-ok" }, "Active"),
          k.revoked_at ? "—" : h("button", { type: "button", class: "btn btn-danger", "aria-label": `Revoke ${k.name}`,
            onclick: async (ev) => {
              ev.currentTarget.disabled = true;
              try {
                await api.del("/v1/keys/" + encodeURIComponent(k.id));
                toast(`Key ${k.name} revoked: it is refused from now on.`, "ok");
              } catch (e) {
                toast("Not revoked: " + errWords(e), "error");
              }
              await load();
            } }, "Revoke")]), "adm-keys-table")
        : h("p", { class: "empty" }, "No keys yet. Create one above and give it to your agent as " +
          "Authorization: Bearer KEY."));
    };

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      createErr.textContent = "";
      const n = name.value.trim();
      if (!NAME_RE.test(n)) {
        createErr.textContent = "Not created: a name of 1 to 64 printable characters is needed.";
        return;
      }
      try {
        const r = await api.post("/v1/keys", { name: n });
        name.value = "";
        const secret = h("input", { id: "adm-key-secret", type: "text", readonly: "", value: r.secret,
          spellcheck: "false", autocomplete: "off" });
        secret.value = r.secret;
        const copy = h("button", { type: "button", class: "btn btn-primary" }, "Copy key");
        copy.addEventListener("click", async () => {
          try {
            await navigator.clipboard.writeText(r.secret);
            toast("Key copied.", "ok");
          } catch {
            secret.select();
            toast("Select the key and copy it (the browser refused the clipboard).", "info");
          }
        });
        const dismiss = h("button", { type: "button", class: "btn btn-quiet" }, "Done, hide the key");
        dismiss.addEventListener("click", () => shown.replaceChildren());
        shown.replaceChildren(h("div", { class: "adm-once" },
          h("p", {}, h("strong", {}, `Key "${r.key.name}" created. `),
            "This secret is shown once: copy it now; it cannot be shown again, only revoked."),
          h("label", { for: "adm-key-secret" }, "The new key (shown once)"),
          h("div", { class: "adm-copy-row" }, secret, copy), dismiss));
        await load();
      } catch (e) {
        createErr.textContent = "Not created: " + errWords(e);
      }
    });
    await load();
    // leaving the page forgets the secret: it is in no state kept beyond this view
    return () => shown.replaceChildren();
  },
};
