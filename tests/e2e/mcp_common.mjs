// The checks both transports must pass: the same tools, whichever way a
// client reaches them (Streamable HTTP, or stdio through `airlock mcp`).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { PNG_PY, pngSize, text } from './util.mjs';

export function commonTests(connect, label) {
  let client;
  const thread = `e2e-${label}-${Date.now()}`;

  test(`${label}: connect and list the tools`, async () => {
    ({ client } = await connect());
    assert.equal(client.getServerVersion().name, 'airlock');
    assert.ok(client.getServerCapabilities().tools, 'no tools capability');
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['code_execution', 'list_artifacts', 'read_artifact', 'run_skill_script']);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', `${t.name}: inputSchema`);
      assert.ok(t.description.length > 80, `${t.name}: description too thin for a model`);
    }
    const ce = tools.find((t) => t.name === 'code_execution');
    assert.deepEqual(ce.inputSchema.properties.language.enum, ['python', 'node', 'bash']);
    assert.deepEqual(ce.inputSchema.required, ['language', 'code']);
  });

  test(`${label}: run Python`, async () => {
    const r = await client.callTool({ name: 'code_execution', arguments: { language: 'python', code: 'import sys\nprint(sum(range(10)), sys.version_info[0])' } });
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /succeeded/);
    assert.match(text(r), /\n45 3\n/);
    assert.equal(r.structuredContent.exit_code, 0);
    assert.equal(r.structuredContent.state, 'succeeded');
  });

  test(`${label}: run Node`, async () => {
    const r = await client.callTool({ name: 'code_execution', arguments: { language: 'node', code: 'console.log([1, 2, 3].map((x) => x * 7).join("+"))' } });
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /7\+14\+21/);
  });

  test(`${label}: a failing program is an error result with its exit code and stderr`, async () => {
    const r = await client.callTool({ name: 'code_execution', arguments: { language: 'bash', code: 'echo to-stderr >&2; exit 3' } });
    assert.equal(r.isError, true);
    assert.equal(r.structuredContent.exit_code, 3);
    assert.equal(r.structuredContent.state, 'failed');
    assert.match(text(r), /exit code 3/);
    assert.match(text(r), /stderr:\nto-stderr/);
  });

  test(`${label}: live output and progress while it runs`, async () => {
    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params); });
    const progress = [];
    const r = await client.callTool(
      { name: 'code_execution', arguments: { language: 'bash', code: 'echo first; sleep 1; echo second' } },
      undefined, { onprogress: (p) => progress.push(p) });
    assert.equal(r.isError, false, text(r));
    const out = logs.filter((l) => l.logger === 'stdout').map((l) => l.data).join('');
    assert.equal(out, 'first\nsecond\n');
    assert.ok(progress.length >= 2, `progress notifications: ${JSON.stringify(progress)}`);
    for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
  });

  let chartUri, notesUri;
  test(`${label}: a chart comes back as an image, files as resource links`, async () => {
    const r = await client.callTool({ name: 'code_execution', arguments: { language: 'python', code: PNG_PY, thread, description: 'draw a chart' } });
    assert.equal(r.isError, false, text(r));
    const images = r.content.filter((c) => c.type === 'image');
    assert.equal(images.length, 1, JSON.stringify(r.content.map((c) => c.type)));
    assert.equal(images[0].mimeType, 'image/png');
    assert.deepEqual(pngSize(images[0].data), { width: 2, height: 3 });
    const links = r.content.filter((c) => c.type === 'resource_link');
    assert.deepEqual(links.map((l) => l.name).sort(), ['chart.png', 'notes.txt']);
    chartUri = links.find((l) => l.name === 'chart.png').uri;
    notesUri = links.find((l) => l.name === 'notes.txt').uri;
    assert.match(chartUri, /^airlock:\/\/artifacts\/art_/);
  });

  test(`${label}: read an artifact back, text and binary`, async () => {
    const t = await client.callTool({ name: 'read_artifact', arguments: { uri: notesUri } });
    assert.equal(t.isError, false, text(t));
    const res = t.content.find((c) => c.type === 'resource').resource;
    assert.equal(res.uri, notesUri);
    assert.equal(res.text, 'rows: 3\n');
    const b = await client.callTool({ name: 'read_artifact', arguments: { uri: chartUri } });
    assert.equal(b.isError, false, text(b));
    const blob = b.content.find((c) => c.type === 'resource').resource;
    assert.deepEqual(pngSize(blob.blob), { width: 2, height: 3 });
    assert.equal(blob.mimeType, 'image/png');
  });

  test(`${label}: artifacts are resources too`, async () => {
    assert.ok(client.getServerCapabilities().resources, 'no resources capability');
    const { contents } = await client.readResource({ uri: notesUri });
    assert.deepEqual(contents, [{ uri: notesUri, mimeType: 'text/plain; charset=utf-8', text: 'rows: 3\n' }]);
    const { resources } = await client.listResources();
    assert.ok(resources.some((r) => r.uri === chartUri && r.mimeType === 'image/png'), JSON.stringify(resources));
    await assert.rejects(client.readResource({ uri: 'airlock://artifacts/art_nope' }), (e) => e.code === -32002);
  });

  test(`${label}: the thread's files are listed and seen by the next run`, async () => {
    const l = await client.callTool({ name: 'list_artifacts', arguments: { thread } });
    assert.equal(l.isError, false, text(l));
    assert.deepEqual(l.structuredContent.artifacts.map((a) => a.path).sort(), ['chart.png', 'notes.txt']);
    const r = await client.callTool({ name: 'code_execution', arguments: { language: 'bash', code: 'cat /work/documents/notes.txt', thread } });
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /rows: 3/);
  });

  test(`${label}: input files land in /work`, async () => {
    const r = await client.callTool({ name: 'code_execution', arguments: { language: 'python', code: 'print(open("data.csv").read().upper(), end="")', files: [{ name: 'data.csv', content: 'a,b\n1,2\n' }] } });
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /A,B\n1,2/);
  });

  test(`${label}: tool errors are results a model can read; unknown tools are protocol errors`, async () => {
    const bad = await client.callTool({ name: 'code_execution', arguments: { language: 'cobol', code: 'x' } });
    assert.equal(bad.isError, true);
    assert.match(text(bad), /language/);
    const missing = await client.callTool({ name: 'read_artifact', arguments: { uri: 'airlock://artifacts/art_doesnotexist' } });
    assert.equal(missing.isError, true);
    assert.match(text(missing), /No artifact/);
    const skill = await client.callTool({ name: 'run_skill_script', arguments: { skill: 'no-such-skill', entrypoint: 'build' } });
    assert.equal(skill.isError, true);
    assert.match(text(skill), /not_found.*no skill named no-such-skill/);
    await assert.rejects(client.callTool({ name: 'no_such_tool', arguments: {} }), (e) => e.code === -32602 && /Unknown tool/.test(e.message));
  });

  test(`${label}: ping and close`, async () => {
    await client.ping();
    await client.close();
  });
}
