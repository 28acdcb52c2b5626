// What an empty page says to do next: how an agent reaches this service
// (its own URL), by REST, MCP and the E2B SDK, each with a Copy button.
import { h } from "./dom.js";

// a snippet to paste: its label, the text, and "Copy WHAT" beside the label
// (the clipboard where the browser allows it; else the text is selected)
function snippet(label, what, text) {
  const pre = h("pre", { class: "snippet", tabindex: "0", "aria-label": what }, h("code", {}, text));
  const copy = h("button", { type: "button", class: "btn btn-quiet btn-small", "aria-label": `Copy the ${what}` }, "Copy");
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      copy.textContent = "Copied";
    } catch {
      // no clipboard (plain http off localhost): select it for Ctrl-C
      const range = document.createRange();
      range.selectNodeContents(pre);
      const sel = getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      copy.textContent = "Selected: press Ctrl-C";
    }
    setTimeout(() => { copy.textContent = "Copy"; }, 2500);
  });
  return [h("div", { class: "snippet-head" }, h("p", { class: "snippet-label" }, label), copy), pre];
}

export function startSnippets() {
  const url = location.origin;
  // one placeholder in all three, the one the note below says how to get
  const curl = `curl -s -X POST "${url}/v1/runs?wait=true" \\
  -H "Authorization: Bearer YOUR_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{"language": "python", "code": "print(\\"hello from airlock\\")"}'`;
  const mcp = JSON.stringify({ mcpServers: { airlock: { type: "http", url: `${url}/mcp`,
    headers: { Authorization: "Bearer YOUR_API_KEY" } } } }, null, 2);
  const e2b = `export E2B_API_URL=${url}
export E2B_SANDBOX_URL=${url}
export E2B_API_KEY=YOUR_API_KEY`;
  return [
    ...snippet("REST (curl)", "curl command", curl),
    ...snippet("MCP (Claude, Cursor, any MCP client)", "MCP configuration", mcp),
    ...snippet("E2B SDK (environment variables)", "E2B environment variables", e2b),
    h("p", { class: "muted" }, "Replace YOUR_API_KEY with a key: make one on the ",
      h("a", { href: "#/keys" }, "Keys"), " page (shown once), or an operator runs ",
      h("code", {}, "airlock admin key create --person ID"), "."),
  ];
}
