// e2b 2.51.0 and @e2b/code-interpreter 2.8.0, unchanged, on a workspace with
// e2b_session_box on (tests/integration/test_e2b_session.py turns it on):
// a sandbox's calls share one session box, so a cell's names are there for
// the next cell, a background process outlives the call that started it,
// and a call's timeout ends that call only (docs/api.md, "Session box").
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Sandbox } from '@e2b/code-interpreter';
import { TimeoutError } from 'e2b';
import { env } from './util.mjs';

const url = env('AIRLOCK_URL');
const opts = { apiUrl: url, sandboxUrl: url, apiKey: env('AIRLOCK_API_KEY') };
// whether a `sleep 61` runs in the box (by its command line: ps is not in every image)
const sleeping = "for f in /proc/[0-9]*/cmdline; do [ \"$(tr '\\0' ' ' < $f 2>/dev/null)\" = 'sleep 61 ' ] && " +
  'echo alive && break; done | grep -q alive && echo alive || echo gone';

test('a session box keeps names and processes between calls; a timeout ends its call only', async () => {
  const sbx = await Sandbox.create(opts);
  try {
    assert.equal((await sbx.runCode('x = 1')).error, undefined);
    assert.equal((await sbx.runCode('x + 1')).text, '2');
    const bg = await sbx.commands.run('sleep 61 >/dev/null 2>&1 & echo started');
    assert.equal(bg.stdout, 'started\n');
    assert.equal((await sbx.commands.run(sleeping)).stdout, 'alive\n');
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run('sleep 20', { timeoutMs: 1500 }), (err) => err instanceof TimeoutError);
    assert.ok(Date.now() - t0 < 10_000, `the timeout took ${Date.now() - t0} ms`);
    assert.equal((await sbx.commands.run(sleeping)).stdout, 'alive\n');
    assert.equal((await sbx.runCode('x * 10')).text, '10');
  } finally {
    await sbx.kill();
  }
});
