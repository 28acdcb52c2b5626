// @daytonaio/sdk, unchanged, against the Daytona test double
// (tests/integration/daytona_double.py), which airlock's daytona driver is
// tested against: this proves the double speaks what the real SDK expects,
// so the driver's tests mean something. Only apiUrl and the key differ from a
// real Daytona. The pytest wrapper (test_daytona_double.py) then checks the
// calls the double saw.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Daytona } from '@daytonaio/sdk';
import { env } from './util.mjs';

const apiUrl = env('DAYTONA_DOUBLE_URL');
const daytona = new Daytona({ apiKey: env('DAYTONA_DOUBLE_KEY'), apiUrl, target: 'us' });
let sandbox;

before(async () => {
  sandbox = await daytona.create({ language: 'python', envVars: { GREETING: 'hello' }, labels: { suite: 'airlock' } });
});

after(async () => {
  // the SDK keeps a socket.io client trying to reconnect otherwise
  await daytona[Symbol.asyncDispose]();
});

test('create: a started sandbox with its labels and env; get finds it by id', async () => {
  assert.equal(sandbox.state, 'started');
  assert.equal(sandbox.labels['code-toolbox-language'], 'python');
  assert.equal(sandbox.labels.suite, 'airlock');
  assert.deepEqual(sandbox.env, { GREETING: 'hello' });
  const again = await daytona.get(sandbox.id);
  assert.equal(again.id, sandbox.id);
  assert.equal(again.state, 'started');
});

test('upload, then executeCommand: exit code, merged output, cwd, env of the sandbox and of the call', async () => {
  const script = [
    'import os, sys',
    'data = open("data/in.txt").read().strip()',       // relative to the home directory, uploaded below
    'os.makedirs("/out/sub", exist_ok=True)',
    'open("/out/sub/result.txt", "w").write(data.upper() + "\\n")',
    'print(os.environ["GREETING"], os.environ["EXTRA"], os.getcwd(), data, flush=True)',
    'print("to stderr", file=sys.stderr)',
    'sys.exit(3)',
  ].join('\n');
  await sandbox.fs.uploadFiles([
    { source: Buffer.from(script), destination: '/work/main.py' },
    { source: Buffer.from('payload\n'), destination: 'data/in.txt' },
  ]);
  await sandbox.fs.uploadFile(Buffer.from('single\n'), '/work/single.txt');
  const r = await sandbox.process.executeCommand('sh -c "cd /home/daytona && python3 /work/main.py"', '/work', { EXTRA: 'x1' }, 30);
  assert.equal(r.exitCode, 3);
  assert.equal(r.result, 'hello x1 /home/daytona payload\nto stderr\n');
  const cwd = await sandbox.process.executeCommand('pwd', '/work');
  assert.deepEqual([cwd.exitCode, cwd.result], [0, '/work\n']);
  // no shell: a redirection is an argument, as in Daytona's daemon
  const literal = await sandbox.process.executeCommand("echo 'a b' > /out/nothing");
  assert.equal(literal.result, 'a b > /out/nothing\n');
});

test('listFiles and downloadFile see what the command left in /out', async () => {
  const top = await sandbox.fs.listFiles('/out');
  assert.deepEqual(top.map((f) => [f.name, f.isDir]), [['sub', true]]);
  const sub = await sandbox.fs.listFiles('/out/sub');
  assert.deepEqual(sub.map((f) => [f.name, f.size, f.isDir]), [['result.txt', 8, false]]);
  const work = (await sandbox.fs.listFiles('/work')).map((f) => f.name);
  assert.deepEqual(work, ['main.py', 'single.txt']);
  assert.equal((await sandbox.fs.downloadFile('/out/sub/result.txt')).toString(), 'PAYLOAD\n');
  assert.equal((await sandbox.fs.downloadFile('/work/single.txt')).toString(), 'single\n');
  await assert.rejects(sandbox.fs.downloadFile('/out/missing.txt'), /not found/);
});

test('codeRun runs Python; a command over its timeout is refused', async () => {
  const r = await sandbox.process.codeRun('import sys\nprint(6 * 7, sys.argv[1:])', { argv: ['a'] });
  assert.equal(r.exitCode, 0);
  assert.equal(r.result, "42 ['a']\n");
  const t0 = Date.now();
  await assert.rejects(sandbox.process.executeCommand('sleep 20', undefined, undefined, 1),
    (e) => e.statusCode === 408 && /timed out/.test(e.message));
  assert.ok(Date.now() - t0 < 10000, 'the timeout was not applied');
});

test('delete: the sandbox is gone, get says 404', async () => {
  const other = await daytona.create({ language: 'python' });
  await daytona.delete(other);
  await assert.rejects(daytona.get(other.id), (e) => e.statusCode === 404);
  await sandbox.delete();
  await assert.rejects(daytona.get(sandbox.id), (e) => e.statusCode === 404);
});

test('a wrong key is refused with 401', async () => {
  const bad = new Daytona({ apiKey: 'dtn_wrong', apiUrl, target: 'us' });
  try {
    await assert.rejects(bad.create({ language: 'python' }), (e) => e.statusCode === 401 && /Invalid credentials/.test(e.message));
  } finally {
    await bad[Symbol.asyncDispose]();
  }
});
