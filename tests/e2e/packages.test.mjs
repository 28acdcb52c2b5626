// Packages (issue 38) through the official clients, unchanged: the MCP SDK's
// code_execution (its input schema, its `packages` argument) and the E2B
// SDK's Sandbox.create metadata `airlock_packages`, against a real
// `airlock serve` (tests/integration/test_packages_api.py hands over its URL
// and key). The "refus" tests run on a service whose installs are off.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Sandbox } from 'e2b';
import { env, httpClient, text } from './util.mjs';

const url = env('AIRLOCK_URL');
const opts = () => ({ apiUrl: url, sandboxUrl: url, apiKey: env('AIRLOCK_API_KEY') });
const TELL = 'tell the user that the packages (requests==2.31.0) could not be installed, and do not substitute '
  + 'something else';

test('mcp: code_execution\'s schema takes packages, and a refused install says what to tell the user', async () => {
  const { client } = await httpClient();
  try {
    const { tools } = await client.listTools();
    const ce = tools.find((t) => t.name === 'code_execution');
    const pk = ce.inputSchema.properties.packages;
    assert.equal(pk.type, 'object');
    assert.equal(pk.additionalProperties, false);
    assert.deepEqual(Object.keys(pk.properties).sort(), ['node', 'python']);
    assert.equal(pk.properties.python.maxItems, 32);
    const res = await client.callTool({ name: 'code_execution', arguments: {
      language: 'python', code: 'print(1)', packages: { python: ['requests==2.31.0'] } } });
    assert.equal(res.isError, true);
    assert.match(text(res), /package installs are disabled on this service/);
    assert.ok(text(res).includes(TELL), text(res));
  } finally {
    await client.close();
  }
});

test('mcp: a bad spec is refused by name', async () => {
  const { client } = await httpClient();
  try {
    const res = await client.callTool({ name: 'code_execution', arguments: {
      language: 'python', code: 'print(1)', packages: { python: ['-e git+https://example.com/x.git'] } } });
    assert.equal(res.isError, true);
    assert.match(text(res), /packages\.python\[0\]/);
  } finally {
    await client.close();
  }
});

test('e2b: Sandbox.create with metadata airlock_packages is refused when installs are off', async () => {
  await assert.rejects(
    Sandbox.create('base', { ...opts(), metadata: { airlock_packages: JSON.stringify({ python: ['requests==2.31.0'] }) } }),
    (e) => e.message.includes('package installs are disabled on this service') && e.message.includes(TELL));
  await assert.rejects(
    Sandbox.create('base', { ...opts(), metadata: { airlock_packages: '{"python": "requests"' } }),
    (e) => /airlock_packages must be a JSON string of an object/.test(e.message));
  // 32 specs (1.9 KB: over any other key's 1,024 bytes) are read as packages
  // (then refused as off), not refused as a too long metadata value
  const many = Array.from({ length: 32 }, (_, i) => `package-with-a-long-name-number-${i}==1.0.0`);
  await assert.rejects(
    Sandbox.create('base', { ...opts(), metadata: { airlock_packages: JSON.stringify({ python: many }) } }),
    (e) => e.message.includes('package installs are disabled on this service'));
});

// On a service whose installs are on, with the tests' index (AIRLOCK_PKG_SPEC,
// AIRLOCK_PKG_MODULE: a wheel whose module's VERSION is AIRLOCK_PKG_VERSION),
// selected by the name pattern "^index: " (without those variables they fail,
// naming the one that is missing).

test('index: mcp code_execution with packages and a thread imports them, and so does the thread\'s next run', async () => {
  const { client } = await httpClient();
  const thread = `mcp-pk-${Date.now()}`;
  const mod = env('AIRLOCK_PKG_MODULE');
  try {
    const progress = [];
    const res = await client.callTool({ name: 'code_execution', arguments: {
      language: 'python', code: `import ${mod}; print(${mod}.VERSION)`, thread,
      packages: { python: [env('AIRLOCK_PKG_SPEC')] } } }, undefined,
    { onprogress: (p) => progress.push(p.message) });
    assert.equal(res.isError, false, text(res));
    assert.equal(res.structuredContent.state, 'succeeded');
    assert.ok(text(res).includes(env('AIRLOCK_PKG_VERSION')), text(res));
    assert.ok(progress.some((m) => /is installing its packages/.test(m)), progress.join(' | '));
    assert.ok(progress.some((m) => /packages are ready/.test(m)), progress.join(' | '));
    const again = await client.callTool({ name: 'code_execution', arguments: {
      language: 'python', code: `import ${mod}; print(${mod}.VERSION)`, thread } });
    assert.equal(again.isError, false, text(again));
    assert.ok(text(again).includes(env('AIRLOCK_PKG_VERSION')), text(again));
  } finally {
    await client.close();
  }
});

test('index: e2b metadata airlock_packages, and every command of the sandbox imports them', async () => {
  const mod = env('AIRLOCK_PKG_MODULE');
  const sbx = await Sandbox.create('base', { ...opts(),
    metadata: { airlock_packages: JSON.stringify({ python: [env('AIRLOCK_PKG_SPEC')] }) } });
  try {
    for (let i = 0; i < 2; i++) {
      const r = await sbx.commands.run(`python3 -c 'import ${mod}; print(${mod}.VERSION)'`);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, `${env('AIRLOCK_PKG_VERSION')}\n`);
    }
  } finally {
    await sbx.kill();
  }
});

// test_packages_attack.py: a spec its index has not (AIRLOCK_PKG_MISSING),
// selected by the name pattern "^attack: ".

test('attack: mcp code_execution whose install fails says why and what to tell the user', async () => {
  const { client } = await httpClient();
  const missing = env('AIRLOCK_PKG_MISSING');
  try {
    const res = await client.callTool({ name: 'code_execution', arguments: {
      language: 'python', code: 'print(1)', packages: { python: [missing] } } });
    assert.equal(res.isError, true);
    assert.equal(res.structuredContent.reason, 'install_failed');
    const t = text(res);
    assert.ok(t.includes('The packages could not be installed: the python install (pip) failed'), t);
    assert.ok(t.includes(`No matching distribution found for ${missing}`), t);
    assert.ok(t.includes('Tell the user so, and do not substitute something else.'), t);
  } finally {
    await client.close();
  }
});

test('attack: e2b command of a sandbox whose packages fail to install says why', async () => {
  const missing = env('AIRLOCK_PKG_MISSING');
  const sbx = await Sandbox.create('base', { ...opts(), metadata: { airlock_packages: JSON.stringify({ python: [missing] }) } });
  try {
    const r = await sbx.commands.run('echo hi').catch((e) => e);
    assert.equal(r.exitCode, 1);
    assert.equal(r.stdout, '');
    assert.ok(r.error.includes('the sandbox\'s packages could not be installed: the python install (pip) failed'), r.error);
    assert.ok(r.error.includes(`No matching distribution found for ${missing}`), r.error);
    assert.ok(r.error.includes('Tell the user so, and do not substitute something else'), r.error);
  } finally {
    await sbx.kill();
  }
});
