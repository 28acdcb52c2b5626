// The E2B SDK (e2b 2.51.0), unchanged, against airlock's E2B-compatible API
// on a real `airlock serve`: the control plane (create, getInfo, list,
// setTimeout, connect, pause, kill) and the sandbox plane's files and
// filesystem RPCs. Only its URLs and key differ from E2B's cloud
// (tests/integration/test_e2b_control.py hands them over).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  AuthenticationError, FileNotFoundError, InvalidArgumentError, NotFoundError, Sandbox, SandboxError,
  SandboxNotFoundError,
} from 'e2b';
import { env } from './util.mjs';

const url = env('AIRLOCK_URL');
const opts = (key = env('AIRLOCK_API_KEY')) => ({ apiUrl: url, sandboxUrl: url, apiKey: key });
const run = `r${Date.now()}`;

test('create with metadata and envs; getInfo says what was asked', async () => {
  const sbx = await Sandbox.create('base', { ...opts(), metadata: { run, who: 'create' }, envs: { GREETING: 'hi' },
    timeoutMs: 120_000 });
  try {
    assert.match(sbx.sandboxId, /^sbx_[0-9a-z]{20}$/);
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, 'base');
    assert.deepEqual(info.metadata, { run, who: 'create' });
    assert.equal(info.state, 'running');
    assert.equal(info.envdVersion, '0.4.0');
    const left = info.endAt.getTime() - Date.now();
    assert.ok(left > 100_000 && left <= 121_000, `endAt ${info.endAt.toISOString()}`);
    assert.ok(info.startedAt.getTime() <= Date.now());
    assert.equal(await sbx.isRunning(), true);
  } finally {
    await sbx.kill();
  }
});

test('an unknown template is refused, and so is a network airlock cannot express', async () => {
  await assert.rejects(Sandbox.create('no-such-template', opts()), (e) => /template not found/.test(e.message));
  // (the control plane's 400 is the SDK's SandboxError "400: ...")
  await assert.rejects(Sandbox.create('base', { ...opts(), network: { denyOut: ['8.8.8.8'] } }),
    (e) => e instanceof SandboxError && /^400: .*cannot deny single destinations/.test(e.message));
  // the test workspace's network_allowed is offline only: the internet is wider
  await assert.rejects(Sandbox.create('base', { ...opts(), allowInternetAccess: true }),
    (e) => e instanceof SandboxError && /^400: .*network/.test(e.message));
  await assert.rejects(Sandbox.create('base', { ...opts(), envs: { LD_PRELOAD: '/x.so' } }),
    (e) => e instanceof SandboxError && /^400: .*LD_PRELOAD/.test(e.message));
  await assert.rejects(Sandbox.create('base', { ...opts(), timeoutMs: 2 * 86400_000 }),
    (e) => e instanceof SandboxError && /^400: timeout/.test(e.message));
});

test('list filters by metadata and pages with nextToken', async () => {
  const made = [];
  try {
    for (let i = 0; i < 3; i++)
      made.push(await Sandbox.create({ ...opts(), metadata: { run, list: 'yes', n: String(i) } }));
    const other = await Sandbox.create({ ...opts(), metadata: { run, list: 'no' } });
    made.push(other);
    const pager = Sandbox.list({ ...opts(), query: { metadata: { run, list: 'yes' } }, limit: 2 });
    const first = await pager.nextItems();
    assert.equal(first.length, 2);
    assert.equal(pager.hasNext, true);
    const second = await pager.nextItems();
    assert.equal(second.length, 1);
    assert.equal(pager.hasNext, false);
    const ids = [...first, ...second].map((s) => s.sandboxId).sort();
    assert.deepEqual(ids, made.slice(0, 3).map((s) => s.sandboxId).sort());
    // newest first, and each as a listed sandbox
    assert.equal(first[0].sandboxId, made[2].sandboxId);
    assert.equal(first[0].state, 'running');
    assert.equal(first[0].metadata.n, '2');
    // a state filter: none of them is paused
    const paused = await Sandbox.list({ ...opts(), query: { metadata: { run }, state: ['paused'] } }).nextItems();
    assert.equal(paused.length, 0);
  } finally {
    for (const s of made) await s.kill();
  }
});

test('setTimeout moves the end; connect hands back a working sandbox', async () => {
  const sbx = await Sandbox.create({ ...opts(), timeoutMs: 60_000 });
  try {
    await sbx.setTimeout(600_000);
    const left = (await sbx.getInfo()).endAt.getTime() - Date.now();
    assert.ok(left > 590_000 && left <= 601_000, `left ${left}`);
    await sbx.files.write('/home/user/note.txt', 'kept');
    const again = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal(await again.files.read('/home/user/note.txt'), 'kept');
    await assert.rejects(Sandbox.setTimeout('sbx_00000000000000000000', 1000, opts()), SandboxNotFoundError);
  } finally {
    await sbx.kill();
  }
});

test('pause keeps the files; connect resumes', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    await sbx.files.write('/work/kept.txt', 'across a pause');
    assert.equal(await sbx.pause(), true);
    assert.equal(await sbx.pause(), false, 'paused already');
    assert.equal((await sbx.getInfo()).state, 'paused');
    assert.equal(await sbx.isRunning(), false, 'a paused sandbox is not running');
    const listed = await Sandbox.list({ ...opts(), query: { state: ['paused'] } }).nextItems();
    assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId));
    const back = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal((await back.getInfo()).state, 'running');
    assert.equal(await back.files.read('/home/user/kept.txt'), 'across a pause');
  } finally {
    await sbx.kill();
  }
});

test('kill is true once, then false; a killed sandbox is gone', async () => {
  const sbx = await Sandbox.create(opts());
  assert.equal(await sbx.kill(), true);
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts()), false);
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts()), SandboxNotFoundError);
  await assert.rejects(Sandbox.connect(sbx.sandboxId, opts()), SandboxNotFoundError);
  assert.equal(await sbx.isRunning(), false);
});

test('files: write, read, list, exists, makeDir, rename, remove', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    const w = await sbx.files.write('/home/user/a/b.txt', 'hello');
    assert.equal(w.path, '/home/user/a/b.txt');
    assert.equal(w.name, 'b.txt');
    assert.equal(await sbx.files.read('a/b.txt'), 'hello', 'a relative path is under /home/user');
    const bytes = await sbx.files.read('/work/a/b.txt', { format: 'bytes' });
    assert.deepEqual(Buffer.from(bytes), Buffer.from('hello'));
    const many = await sbx.files.write([{ path: '/home/user/m1.txt', data: '1' }, { path: '/out/r.txt', data: 'res' }]);
    assert.deepEqual(many.map((e) => e.path).sort(), ['/home/user/m1.txt', '/out/r.txt']);
    assert.equal(await sbx.files.read('/out/r.txt'), 'res');
    const top = await sbx.files.list('/home/user');
    assert.deepEqual(top.map((e) => `${e.name}:${e.type}`), ['a:dir', 'm1.txt:file']);
    const deep = await sbx.files.list('/home/user', { depth: 2 });
    const file = deep.find((e) => e.path === '/home/user/a/b.txt');
    assert.ok(file, JSON.stringify(deep));
    assert.equal(file.size, 5);
    assert.equal(file.permissions, '-rw-r--r--');
    assert.ok(file.modifiedTime instanceof Date);
    assert.equal(await sbx.files.exists('/home/user/a/b.txt'), true);
    assert.equal(await sbx.files.exists('/home/user/nope'), false);
    assert.equal(await sbx.files.makeDir('/home/user/d/e'), true);
    assert.equal(await sbx.files.makeDir('/home/user/d/e'), false, 'exists already');
    assert.equal((await sbx.files.getInfo('/home/user/d')).type, 'dir');
    const moved = await sbx.files.rename('/home/user/a/b.txt', '/home/user/d/e/c.txt');
    assert.equal(moved.path, '/home/user/d/e/c.txt');
    assert.equal(await sbx.files.exists('/home/user/a/b.txt'), false);
    assert.equal(await sbx.files.read('/home/user/d/e/c.txt'), 'hello');
    await sbx.files.remove('/home/user/d');
    assert.equal(await sbx.files.exists('/home/user/d/e/c.txt'), false);
    await assert.rejects(sbx.files.read('/home/user/d/e/c.txt'), FileNotFoundError);
    await assert.rejects(sbx.files.list('/home/user/nope'), (e) => e instanceof FileNotFoundError || e instanceof NotFoundError);
  } finally {
    await sbx.kill();
  }
});

test('a path outside /home/user, /work and /out is refused, clearly', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    for (const p of ['/etc/passwd', '/home/user/../../etc/passwd', '/tmp/x'])
      await assert.rejects(sbx.files.read(p), (e) => e instanceof InvalidArgumentError &&
        /only \/home\/user \(= \/work\) and \/out|"\.\."/.test(e.message), p);
    await assert.rejects(sbx.files.write('/etc/x', 'no'), InvalidArgumentError);
    await assert.rejects(sbx.files.list('/'), InvalidArgumentError);
    await assert.rejects(sbx.files.makeDir('/root/x'), InvalidArgumentError);
  } finally {
    await sbx.kill();
  }
});

test("another tenant's sandbox is not found; a bad key and a wrong access token are refused", async () => {
  const sbx = await Sandbox.create(opts());
  try {
    const other = opts(env('AIRLOCK_OTHER_KEY'));
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId, other), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(sbx.sandboxId, other), false);
    await assert.rejects(Sandbox.connect(sbx.sandboxId, other), SandboxNotFoundError);
    const theirs = await Sandbox.list({ ...other, query: { metadata: { run } } }).nextItems();
    assert.equal(theirs.length, 0);
    await assert.rejects(Sandbox.create(opts('al_not_a_key_at_all')), AuthenticationError);
    await assert.rejects(Sandbox.list(opts('al_not_a_key_at_all')).nextItems(), AuthenticationError);
    const forged = new Sandbox({ ...opts(), sandboxId: sbx.sandboxId, envdAccessToken: 'f'.repeat(64),
      envdVersion: '0.4.0' });
    await assert.rejects(forged.files.read('/home/user/x'), AuthenticationError);
    await assert.rejects(forged.files.list('/home/user'), AuthenticationError);
    assert.equal(await Sandbox.getInfo(sbx.sandboxId, opts()).then((i) => i.state), 'running', 'still there');
  } finally {
    await sbx.kill();
  }
});

test('the reaper kills a sandbox at its end', async () => {
  const sbx = await Sandbox.create({ ...opts(), timeoutMs: 1000 });
  await sbx.files.write('/home/user/x.txt', 'soon gone');
  let gone = false;
  for (let i = 0; i < 40 && !gone; i++) {
    await new Promise((r) => setTimeout(r, 250));
    gone = await Sandbox.getInfo(sbx.sandboxId, opts()).then(() => false, (e) => e instanceof SandboxNotFoundError);
  }
  assert.ok(gone, 'still listed 10 s after its 1 s timeout');
  assert.equal(await sbx.isRunning(), false);
  await assert.rejects(sbx.files.read('/home/user/x.txt'), (e) => e instanceof SandboxError || e instanceof Error);
});
