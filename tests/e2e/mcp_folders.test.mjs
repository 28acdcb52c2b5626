// Connected folders through MCP (issue 38): the official SDK sees `folders`
// in code_execution's input schema, and a call with it gets the folder's
// files in /work/documents/FOLDER; a path that escapes is an isError result
// naming the rule. Driven by tests/integration/test_folders.py, which lends
// the folder AIRLOCK_FOLDER (holding a.csv) to the key's workspace.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { env, httpClient, text } from './util.mjs';

test('code_execution takes folders and stages them', async () => {
  const { client } = await httpClient();
  const { tools } = await client.listTools();
  const ce = tools.find((t) => t.name === 'code_execution');
  const f = ce.inputSchema.properties.folders;
  assert.equal(f.type, 'array', JSON.stringify(ce.inputSchema.properties));
  assert.deepEqual(f.items.required, ['folder', 'paths']);
  const folder = env('AIRLOCK_FOLDER');
  const r = await client.callTool({ name: 'code_execution', arguments: {
    language: 'python', code: `print(open('/work/documents/${folder}/a.csv').read().strip())`,
    folders: [{ folder, paths: ['a.csv'] }] } });
  assert.equal(r.isError, false, text(r));
  assert.match(text(r), /x,y\n1,2/);
  const bad = await client.callTool({ name: 'code_execution', arguments: {
    language: 'python', code: 'print(1)', folders: [{ folder, paths: ['../etc/passwd'] }] } });
  assert.equal(bad.isError, true, text(bad));
  assert.match(text(bad), /\.\. component/);
  await client.close();
});
