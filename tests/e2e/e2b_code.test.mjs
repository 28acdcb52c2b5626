// @e2b/code-interpreter 2.8.0, unchanged, running cells on a real `airlock
// serve` (tests/integration/test_e2b_commands.py, and test_e2b_code_image.py
// for the chart on the default image): each runCode is one airlock run in
// the sandbox's working directory. Cells do NOT share an interpreter: only
// the files in /home/user carry over (docs/api.md, E2B compatibility).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Sandbox } from '@e2b/code-interpreter';
import { env } from './util.mjs';

const url = env('AIRLOCK_URL');
const opts = { apiUrl: url, sandboxUrl: url, apiKey: env('AIRLOCK_API_KEY') };
const chart = process.env.AIRLOCK_E2B_CHART === '1';

// (one of the two, as the wrapper asks: the chart needs an image with matplotlib)
if (!chart) test('runCode: output, a trailing value, an error, no state kept, files kept; javascript; contexts',
  async () => {
    const sbx = await Sandbox.create(opts);
    try {
      const p = await sbx.runCode('print(1)');
      assert.deepEqual(p.logs.stdout, ['1\n']);
      assert.deepEqual(p.results, []);
      assert.equal(p.error, undefined);
      assert.equal((await sbx.runCode('1+1')).text, '2');
      const v = await sbx.runCode('x = 40\nx + 2');
      assert.equal(v.text, '42');
      assert.equal(v.results.length, 1);
      assert.equal(v.results[0].isMainResult, true);
      assert.equal((await sbx.runCode("'a string'")).text, 'a string');
      const e = await sbx.runCode('print("before")\nraise ValueError("boom")');
      assert.deepEqual(e.logs.stdout, ['before\n']);
      assert.equal(e.error.name, 'ValueError');
      assert.equal(e.error.value, 'boom');
      assert.match(e.error.traceback, /ValueError: boom/);
      // each cell is a fresh interpreter: x of the cell above is gone
      const gone = await sbx.runCode('x');
      assert.equal(gone.error.name, 'NameError');
      // files are kept
      await sbx.runCode('open("kept.txt", "w").write("from a cell")');
      assert.equal(await sbx.files.read('/home/user/kept.txt'), 'from a cell');
      assert.equal((await sbx.runCode('open("kept.txt").read()')).text, 'from a cell');
      // a cell's environment
      const envd = await sbx.runCode('import os\nos.environ["CELL_VAR"] + os.environ["E2B_SANDBOX"]',
        { envs: { CELL_VAR: 'v-' } });
      assert.equal(envd.text, 'v-true');
      // javascript
      const js = await sbx.runCode('console.log("from js"); 6 * 7', { language: 'js' });
      assert.deepEqual(js.logs.stdout, ['from js\n']);
      assert.equal(js.text, '42');
      const jse = await sbx.runCode('null.x', { language: 'javascript' });
      assert.equal(jse.error.name, 'TypeError');
      // contexts are labels: a cell in one runs in its language
      const ctx = await sbx.createCodeContext({ language: 'javascript' });
      assert.equal(ctx.language, 'javascript');
      assert.equal((await sbx.runCode('[1, 2].length', { context: ctx })).text, '2');
      assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
      await sbx.restartCodeContext(ctx);
      await sbx.removeCodeContext(ctx);
    } finally {
      await sbx.kill();
    }
  });

if (chart) test('a matplotlib chart is a PNG result', async () => {
  const sbx = await Sandbox.create('default', opts);
  try {
    const c = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("t")\nplt.show()\n' +
      'print("shown")');
    assert.equal(c.error, undefined, JSON.stringify(c.error));
    assert.deepEqual(c.logs.stdout, ['shown\n']);
    assert.equal(c.results.length, 1);
    assert.ok(Buffer.from(c.results[0].png, 'base64').subarray(0, 8).equals(
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'not a PNG');
    // a figure left open at the cell's end is shown too
    const open = await sbx.runCode('import matplotlib.pyplot as plt\nfig = plt.figure()\nplt.bar([1], [2])');
    assert.equal(open.results.filter((r) => r.png).length, 1);
  } finally {
    await sbx.kill();
  }
});
