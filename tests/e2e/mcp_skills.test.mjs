// Skills through MCP with the official SDK: the bundled chart builder, run
// by run_skill_script on a CSV the agent made in the same thread, comes
// back as a chart the model can look at. Needs a service with the bundled
// skills and the default runtime image (tests/integration/test_mcp.py).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { httpClient, pngSize, text } from './util.mjs';

test('the chart builder draws a CSV of the thread, and the model sees the chart', async () => {
  const { client } = await httpClient();
  const { tools } = await client.listTools();
  const tool = tools.find((t) => t.name === 'run_skill_script');
  // the catalogue of skills, with each entrypoint's argument schema, is in the description
  assert.match(tool.description, /skill "chart-builder"/);
  assert.match(tool.description, /entrypoint "chart".*"required":\["input","x"\]/s);
  const thread = `skills-${Date.now()}`;
  const csv = await client.callTool({ name: 'code_execution', arguments: {
    language: 'python', thread,
    code: 'open("/out/sales.csv", "w").write("month,revenue,cost\\n1,10,4\\n2,14,6\\n3,9,5\\n4,17,8\\n")' } });
  assert.equal(csv.isError, false, text(csv));
  const r = await client.callTool({ name: 'run_skill_script', arguments: {
    skill: 'chart-builder', entrypoint: 'chart', thread,
    arguments: { input: 'documents/sales.csv', x: 'month', kind: 'bar', width: 640, height: 400 } } });
  assert.equal(r.isError, false, text(r));
  const images = r.content.filter((c) => c.type === 'image');
  assert.equal(images.length, 1, JSON.stringify(r.content.map((c) => c.type)));
  assert.deepEqual(pngSize(images[0].data), { width: 640, height: 400 });
  assert.ok(r.content.some((c) => c.type === 'resource_link' && c.name === 'chart.png'));
  // arguments that fail the entrypoint's schema are refused before anything runs
  const bad = await client.callTool({ name: 'run_skill_script', arguments: {
    skill: 'chart-builder', entrypoint: 'chart', arguments: { input: 'documents/sales.csv', x: 'month', kind: 'pie' } } });
  assert.equal(bad.isError, true);
  assert.match(text(bad), /kind/);
  const undeclared = await client.callTool({ name: 'run_skill_script', arguments: { skill: 'chart-builder', entrypoint: 'rm' } });
  assert.equal(undeclared.isError, true);
  assert.match(text(undeclared), /entrypoint/);
  await client.close();
});
