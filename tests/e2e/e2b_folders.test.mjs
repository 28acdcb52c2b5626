// Connected folders through the E2B SDK (e2b, unchanged; issue 38): a
// sandbox made with metadata airlock_folders (a JSON string of POST /v1/runs'
// folders) finds the folder's files in /home/user/documents/FOLDER (its
// /work/documents), and its commands read them; a path that escapes is
// refused at create. Driven by tests/integration/test_folders.py, which lends
// folder AIRLOCK_FOLDER (holding a.csv and sub/b.txt) to the key's workspace.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Sandbox } from 'e2b';
import { env } from './util.mjs';

const url = env('AIRLOCK_URL');
const opts = { apiUrl: url, sandboxUrl: url, apiKey: env('AIRLOCK_API_KEY') };
const folder = env('AIRLOCK_FOLDER');

test('create with airlock_folders stages them in /home/user/documents', async () => {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 120_000,
    metadata: { airlock_folders: JSON.stringify([{ folder, paths: ['a.csv', 'sub'] }]) } });
  try {
    assert.equal(await sbx.files.read(`/home/user/documents/${folder}/a.csv`), 'x,y\n1,2\n');
    const r = await sbx.commands.run(`cat documents/${folder}/sub/b.txt`);
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'bee\n');
  } finally {
    await sbx.kill();
  }
  await assert.rejects(Sandbox.create('base', { ...opts,
    metadata: { airlock_folders: JSON.stringify([{ folder, paths: ['../../etc/passwd'] }]) } }),
  (e) => /400/.test(e.message) && /\.\. component/.test(e.message));
});
