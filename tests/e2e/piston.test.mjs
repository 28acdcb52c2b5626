// piston-client, unchanged, against airlock's Piston-compatible API: only
// its server URL differs (the API key is part of it).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import piston from 'piston-client';
import { env } from './util.mjs';

const server = `${env('AIRLOCK_URL')}/piston/${env('AIRLOCK_API_KEY')}`;

test('runtimes lists python, javascript and bash with real versions', async () => {
  const client = piston({ server });
  const rts = await client.runtimes();
  const langs = rts.map((r) => r.language).sort();
  assert.deepEqual(langs, ['bash', 'javascript', 'python']);
  assert.match(rts.find((r) => r.language === 'python').version, /^3\.\d+/);
});

test('execute Python: stdout, the default args piston-client sends, exit code', async () => {
  const client = piston({ server });
  const r = await client.execute('python', 'import sys\nprint("hi", sys.argv[1:])\nsys.exit(4)');
  assert.equal(r.language, 'python');
  assert.equal(r.run.stdout, "hi ['1', '2', '3']\n");
  assert.equal(r.run.code, 4);
  assert.equal(r.run.signal, null);
});

test('execute JavaScript with stdin and extra files', async () => {
  const client = piston({ server });
  const r = await client.execute({
    language: 'javascript',
    files: [
      { name: 'main.js', content: 'const fs = require("fs"); console.log(fs.readFileSync(0, "utf8").trim(), fs.readFileSync("extra.txt", "utf8").trim())' },
      { name: 'extra.txt', content: 'from-a-file' },
    ],
    stdin: 'from-stdin',
    args: [],
  });
  assert.equal(r.language, 'javascript');
  assert.equal(r.run.stdout, 'from-stdin from-a-file\n');
  assert.equal(r.run.code, 0);
});

test('a run over its time limit is killed, as Piston reports it', async () => {
  const client = piston({ server });
  const r = await client.execute({ language: 'bash', files: [{ content: 'sleep 30' }], runTimeout: 1000 });
  assert.equal(r.run.signal, 'SIGKILL');
  assert.equal(r.run.code, null);
});

test('a wrong key gets no runtimes, and the reason', async () => {
  const client = piston({ server: `${env('AIRLOCK_URL')}/piston/al_wrong` });
  const r = await client.runtimes();
  assert.ok(!Array.isArray(r), JSON.stringify(r));
  assert.equal(r.error.code, 'unauthorized');
});
