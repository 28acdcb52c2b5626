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

test('a run over its time limit is killed at its milliseconds: status TO', async () => {
  const client = piston({ server });
  const r = await client.execute({ language: 'bash', files: [{ content: 'sleep 30' }], runTimeout: 300 });
  assert.equal(r.run.signal, 'SIGKILL');
  assert.equal(r.run.code, null);
  assert.equal(r.run.status, 'TO');
  assert.equal(r.run.message, 'Time limit exceeded (wall clock)');
  // 300 ms, not a second rounded up
  assert.ok(r.run.wall_time >= 300 && r.run.wall_time < 1000, JSON.stringify(r.run));
});

test('a non-zero exit is RE, a fatal signal SG, success no status; cpu_time, wall_time and memory', async () => {
  const client = piston({ server });
  const re = await client.execute('bash', 'exit 3');
  assert.equal(re.run.status, 'RE');
  assert.equal(re.run.message, 'Exited with error status 3');
  assert.equal(re.run.code, 3);
  const sg = await client.execute('bash', 'kill -9 $$');
  assert.equal(sg.run.status, 'SG');
  assert.equal(sg.run.signal, 'SIGKILL');
  assert.equal(sg.run.message, 'Caught fatal signal 9');
  const ok = await client.execute('python', 'x = bytearray(20 << 20)\nprint(len(x))');
  assert.equal(ok.run.stdout, `${20 << 20}\n`);
  assert.equal(ok.run.status, null);
  assert.equal(ok.run.message, null);
  for (const k of ['cpu_time', 'wall_time', 'memory']) assert.ok(Number.isInteger(ok.run[k]), k);
  assert.ok(ok.run.cpu_time > 0 && ok.run.wall_time > 0 && ok.run.wall_time < 10000, JSON.stringify(ok.run));
  assert.ok(ok.run.memory >= 20 << 20 && ok.run.memory < 512 << 20, String(ok.run.memory));
});

test('output past the cap is OL (stdout) or EL (stderr)', async () => {
  const client = piston({ server });
  const ol = await client.execute('python', 'import sys, time\nsys.stdout.write("x" * (3 << 20))\nsys.stdout.flush()\ntime.sleep(30)');
  assert.equal(ol.run.status, 'OL');
  assert.equal(ol.run.message, 'stdout length exceeded');
  assert.equal(ol.run.signal, 'SIGKILL');
  const el = await client.execute('python', 'import sys, time\nsys.stderr.write("e" * (3 << 20))\nsys.stderr.flush()\ntime.sleep(30)');
  assert.equal(el.run.status, 'EL');
  assert.equal(el.run.message, 'stderr length exceeded');
});

test('a wrong key gets no runtimes, and the reason in .message', async () => {
  const client = piston({ server: `${env('AIRLOCK_URL')}/piston/al_wrong` });
  const r = await client.runtimes();
  assert.ok(!Array.isArray(r), JSON.stringify(r));
  assert.match(r.message, /valid API key/);
  assert.equal(r.error.code, 'unauthorized');
});

test('a refused execute says why in .message', async () => {
  const client = piston({ server });
  // a language the runtimes do not list: piston-client sends no version
  const r = await client.execute({ language: 'cobol', files: [{ content: 'x' }] });
  assert.equal(typeof r.message, 'string');
  assert.match(r.message, /want language/);
  const big = await client.execute({ language: 'bash', files: [{ content: 'true' }], runTimeout: 10 ** 9 });
  assert.match(big.message, /ms/);
});

test('packages lists what runs; installing one is refused in Piston\'s shape', async () => {
  // piston-client has no packages call: the same fetch it makes
  const pkgs = await (await fetch(`${server}/api/v2/packages`)).json();
  assert.deepEqual(pkgs.map((p) => p.language).sort(), ['bash', 'javascript', 'python']);
  assert.ok(pkgs.every((p) => p.installed === true && /^\d/.test(p.language_version)), JSON.stringify(pkgs));
  const res = await fetch(`${server}/api/v2/packages`, { method: 'POST', body: JSON.stringify({ language: 'go', version: '1.16.2' }) });
  assert.equal(res.status, 405);
  assert.equal(res.headers.get('allow'), 'GET');
  assert.match((await res.json()).message, /installs no packages/);
});
