/* A client of airlock typed by docs/openapi.json alone: openapi-typescript
 * makes `paths` and `components` of it (./openapi.d.ts), openapi-fetch
 * makes the requests. Under tsc --strict it makes a run, reads its result
 * through the typed fields, lists it, reads and changes the settings, and
 * prints what it saw as one JSON line (test_openapi_client.py checks it).
 * Nothing here is written by hand about the wire: a field the spec gets
 * wrong is a compile error here or a wrong value in the test. */
import createClient from "openapi-fetch";
import type { components, paths } from "./openapi.js";

type Run = components["schemas"]["Run"];
type RunResult = components["schemas"]["RunResult"];
type RunSummary = components["schemas"]["RunSummary"];
type Settings = components["schemas"]["Settings"];
type Reason = RunResult["reason"];

// no @types/node here: the little of Node this uses
declare const process: { env: Record<string, string | undefined>; exitCode?: number };

const baseUrl = process.env["AIRLOCK_URL"];
const key = process.env["AIRLOCK_KEY"];
if (!baseUrl || !key) throw new Error("AIRLOCK_URL and AIRLOCK_KEY are required");

const airlock = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key}` } });

/* a closed set: a reason the spec does not list would not compile here */
function ended(reason: Reason): string {
  switch (reason) {
    case "exited": return "exited";
    case "timeout": case "memory": case "pids": case "output_limit": return "limit";
    case "error": case "canceled": case "service_stopped": return "stopped";
    case "install_failed": return "install";
  }
}

async function main(): Promise<void> {
  const made = await airlock.POST("/v1/runs", {
    params: { query: { wait: true } },
    body: { language: "python", code: "import sys\nprint(6 * 7)\nprint('w', file=sys.stderr)\nopen('/out/n.txt', 'w').write('42')\n",
            thread_id: "typed-client", limits: { timeout_s: 20 } },
  });
  if (made.error) throw new Error(`POST /v1/runs: ${made.response.status} ${made.error.error.code}: ${made.error.error.message}`);
  const run: Run = made.data;
  const result: RunResult | null = run.result;
  if (result === null) throw new Error(`run ${run.id} has no result (${run.state})`);
  // the typed fields: numbers, strings, booleans and nested objects, no casts
  const exitCode: number | null = result.exit_code;
  const stdout: string = result.stdout;
  const truncated: boolean = result.stdout_truncated;
  const wallMs: number = result.wall_ms;
  const seccomp: string = result.controls.seccomp.level;
  const driver: string = result.box.driver;
  const egress: number = result.network?.egress.length ?? 0;
  // @ts-expect-error: a field the result does not have is a compile error (the result is not an untyped object)
  void result.no_such_field;

  const got = await airlock.GET("/v1/runs/{id}", { params: { path: { id: run.id } } });
  if (got.error) throw new Error(`GET /v1/runs/${run.id}: ${got.error.error.message}`);

  const listed = await airlock.GET("/v1/runs", { params: { query: { limit: 50, thread_id: "typed-client" } } });
  if (listed.error) throw new Error(`GET /v1/runs: ${listed.error.error.message}`);
  const mine: RunSummary | undefined = listed.data.runs.find((r) => r.id === run.id);
  const next: string | null = listed.data.next_cursor;

  const arts = await airlock.GET("/v1/threads/{thread_id}/artifacts", { params: { path: { thread_id: "typed-client" } } });
  if (arts.error) throw new Error(`GET artifacts: ${arts.error.error.message}`);

  const before = await airlock.GET("/v1/settings");
  if (before.error) throw new Error(`GET /v1/settings: ${before.error.error.message}`);
  const patched = await airlock.PATCH("/v1/settings", { body: { timeout_s: before.data.timeout_s } });
  if (patched.error) throw new Error(`PATCH /v1/settings: ${patched.error.error.message}`);
  const settings: Settings = patched.data;

  const missing = await airlock.GET("/v1/runs/{id}", { params: { path: { id: "run_no_such_run" } } });
  const missingCode: string | undefined = missing.error?.error.code;

  console.log(JSON.stringify({
    id: run.id, state: run.state, exit_code: exitCode, stdout, stderr: result.stderr, truncated, wall_ms: wallMs,
    seccomp, driver, egress, ended: ended(result.reason), again: got.data.result?.stdout ?? null,
    listed: mine ? { state: mine.state, exit_code: mine.result?.exit_code ?? null } : null, next,
    artifacts: arts.data.artifacts.map((a) => [a.path, a.size]), timeout_s: settings.timeout_s,
    approval_policy: settings.approval_policy, missing: [missing.response.status, missingCode ?? null],
  }));
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack ?? e.message : String(e));
  process.exitCode = 1;
});
