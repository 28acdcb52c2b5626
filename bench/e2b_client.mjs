// The e2b SDK's side of bench/e2b.py: one long-lived Node process (its start
// is not what is measured, as a client application makes many sandboxes in
// one process), the official `e2b` package from tests/e2e/node_modules,
// unchanged. For each line "run" on stdin it times, from the client:
//   Sandbox.create() + commands.run('echo hi'), create to the first stdout
//   byte, to create's return, and to the command's end;
// then kills the sandbox (not timed) and prints one JSON line.
// Environment: AIRLOCK_URL (both planes), AIRLOCK_API_KEY.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import readline from 'node:readline';

const e2e = fileURLToPath(new URL('../tests/e2e/package.json', import.meta.url));
const { Sandbox } = createRequire(e2e)('e2b');
const url = process.env.AIRLOCK_URL;
const apiKey = process.env.AIRLOCK_API_KEY;
if (!url || !apiKey) {
  console.error('AIRLOCK_URL and AIRLOCK_API_KEY are required (bench/e2b.py sets them)');
  process.exit(2);
}
const opts = { apiKey, apiUrl: url, sandboxUrl: url };

async function once() {
  let first = null;
  let out = '';
  const t0 = performance.now();
  const sbx = await Sandbox.create(opts);
  const created = performance.now();
  const r = await sbx.commands.run('echo hi', {
    onStdout: (d) => {
      if (first === null) first = performance.now();
      out += d;
    },
  });
  const end = performance.now();
  await sbx.kill();
  if (r.exitCode !== 0 || r.stdout !== 'hi\n') throw new Error(`echo hi gave exit ${r.exitCode}, stdout ${JSON.stringify(r.stdout)}`);
  return {
    create_ms: created - t0,
    // a server that sends no stdout frame before the end still delivers the output at the end
    first_output_ms: (first ?? end) - t0,
    total_ms: end - t0,
    streamed: first !== null && out === 'hi\n',
  };
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (line.trim() !== 'run') break;
  try {
    console.log(JSON.stringify(await once()));
  } catch (e) {
    console.log(JSON.stringify({ error: String(e?.stack ?? e) }));
  }
}
