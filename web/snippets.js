// What an empty page says to do next: how an agent reaches this service
// (its own URL), by REST, MCP and the E2B SDK.
import { h } from "./dom.js";

export function startSnippets() {
  const url = location.origin;
  const curl = `curl -s -X POST "${url}/v1/runs?wait=true" \\
  -H "Authorization: Bearer $AIRLOCK_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{"language": "python", "code": "print(\\"hello from airlock\\")"}'`;
  const mcp = JSON.stringify({ mcpServers: { airlock: { type: "http", url: `${url}/mcp`,
    headers: { Authorization: "Bearer YOUR_API_KEY" } } } }, null, 2);
  const e2b = `export E2B_API_URL=${url}
export E2B_SANDBOX_URL=${url}
export E2B_API_KEY=YOUR_API_KEY`;
  return [
    h("p", { class: "snippet-label" }, "REST (curl)"),
    h("pre", { class: "snippet", tabindex: "0", "aria-label": "curl command" }, h("code", {}, curl)),
    h("p", { class: "snippet-label" }, "MCP (Claude, Cursor, any MCP client)"),
    h("pre", { class: "snippet", tabindex: "0", "aria-label": "MCP configuration" }, h("code", {}, mcp)),
    h("p", { class: "snippet-label" }, "E2B SDK (environment variables)"),
    h("pre", { class: "snippet", tabindex: "0", "aria-label": "E2B environment variables" }, h("code", {}, e2b)),
    h("p", { class: "muted" }, "An API key is made on the Keys page (shown once), or by an operator with ",
      h("code", {}, "airlock admin key create --person ID"), "."),
  ];
}
