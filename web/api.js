// The console's API client: the same public /v1 API agents call. A person's
// session cookie authenticates it (sent by the browser, HttpOnly: this code
// never sees it); every request that changes something carries the
// session's CSRF token, read from GET /v1/session.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// the API's error in words: its own message, else what happened
async function failure(r, method, path) {
  let doc = null;
  try { doc = await r.json(); } catch { /* not JSON: a proxy's page */ }
  const e = doc && doc.error;
  if (e && e.message) return new ApiError(r.status, e.code || "", e.message);
  return new ApiError(r.status, "", `${method} ${path} failed: the service answered ${r.status} ${r.statusText}`.trim());
}

export function makeApi(getCsrf, onSignedOut) {
  async function request(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const csrf = getCsrf();
    if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
    let r;
    try {
      r = await fetch(path, {
        method, headers, credentials: "same-origin",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      throw new ApiError(0, "network", "The service could not be reached. Check that airlock is running, then try again.");
    }
    if (r.status === 401 && onSignedOut && path !== "/v1/session") onSignedOut();
    if (!r.ok) throw await failure(r, method, path);
    if (r.status === 204) return null;
    const type = r.headers.get("Content-Type") || "";
    return type.includes("json") ? r.json() : r.text();
  }
  return {
    get: (path) => request("GET", path),
    post: (path, body = {}) => request("POST", path, body),
    patch: (path, body) => request("PATCH", path, body),
    put: (path, body) => request("PUT", path, body),
    del: (path) => request("DELETE", path),
    // raw bytes (an artifact's content, an input): a Blob
    async blob(path) {
      const r = await fetch(path, { credentials: "same-origin" });
      if (!r.ok) throw await failure(r, "GET", path);
      return r.blob();
    },
    // the first MAX bytes of a large body (a big log's preview): read from
    // the stream, then the rest is cancelled, so a 100 MiB artifact costs
    // MAX bytes of memory, not 100 MiB. {bytes: Uint8Array, whole: bool}
    async head(path, max) {
      const r = await fetch(path, { credentials: "same-origin" });
      if (!r.ok) throw await failure(r, "GET", path);
      const reader = r.body.getReader();
      const parts = [];
      let n = 0, whole = false;
      while (n < max) {
        const { done, value } = await reader.read();
        if (done) { whole = true; break; }
        parts.push(value);
        n += value.length;
      }
      if (!whole) reader.cancel().catch(() => {});
      const bytes = new Uint8Array(Math.min(n, max));
      let at = 0;
      for (const p of parts) {
        const take = Math.min(p.length, bytes.length - at);
        bytes.set(p.subarray(0, take), at);
        at += take;
      }
      return { bytes, whole: whole && n <= max };
    },
    // Server-Sent Events: onEvent(type, data) for each named event (data
    // parsed as JSON); onState("open"|"retry"|"closed") as the stream
    // connects and drops. Returns the closer.
    stream(path, onEvent, types = ["run"], onState) {
      let es = null, closed = false, timer = null, delay = 1000;
      const connect = () => {
        es = new EventSource(path, { withCredentials: true });
        es.onopen = () => { delay = 1000; onState && onState("open"); };
        for (const t of types) {
          es.addEventListener(t, (ev) => {
            let data = null;
            try { data = JSON.parse(ev.data); } catch { return; }
            onEvent(t, data, ev);
          });
        }
        es.onerror = () => {
          // a stream the service ended or refused (EventSource does not
          // retry a non-200): come back, slower each time
          if (closed || es.readyState !== EventSource.CLOSED) return;
          onState && onState("retry");
          timer = setTimeout(connect, delay);
          delay = Math.min(delay * 2, 30000);
        };
      };
      connect();
      return () => { closed = true; clearTimeout(timer); if (es) es.close(); onState && onState("closed"); };
    },
  };
}
