// airlock's warm start for Node (issue 14). A pooled box runs
// `node main.js` with this file as /work/main.js, before any run is known:
// the runtime starts (V8, the bootstrap, the CommonJS loader) and it waits
// on the fd AIRLOCK_WARM_FD names (a Unix socket from the box's parent,
// above the runtime's own fds, so the run's first open gets a cold start's
// number) for its run. At hand-off the parent has replaced main.js with the
// run's code, and the message on it holds the run's arguments and
// environment (a Node run with stdin is never handed a warm box:
// JavaScript cannot put a passed fd at fd 0). The
// run's code is then loaded as the main module, as `node main.js ARGS`
// would load it: process.argv, process.env, require.main, __filename and
// the working directory are a cold start's own.
//
// Nothing of this file stays: its module leaves the cache, and its names
// were never global. The run is loaded from a fresh tick, so beneath its
// frames is one of Node's own (an uncaught error's trace ends with
// processTicksAndRejections where a cold one ends with run_main_module).
'use strict';
(function warm() {
  const fs = require('fs');
  const Module = require('module');
  const chan = Number(process.env.AIRLOCK_WARM_FD);
  fs.writeSync(chan, 'r');
  // the run: its length and a newline, then NUL-terminated strings (the
  // number of its arguments, its arguments, its environment; src/box/box.c,
  // warm_message): read until all of it is here
  const buf = Buffer.alloc(1 << 16);
  const chunks = [];
  let have = 0, size = -1, head = 0;
  while (size < 0 || have < head + size) {
    let n;
    try {
      n = fs.readSync(chan, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code === 'EAGAIN' || e.code === 'EINTR') continue;
      throw e;
    }
    if (n === 0) process.exit(125);
    chunks.push(Buffer.from(buf.subarray(0, n)));
    have += n;
    if (size < 0) {
      const all = Buffer.concat(chunks);
      const nl = all.indexOf(10);
      if (nl >= 0) {
        size = Number(all.subarray(0, nl).toString('latin1'));
        head = nl + 1;
      }
    }
  }
  const fields = Buffer.concat(chunks).subarray(head, head + size).toString('utf8').split('\0');
  fields.pop();
  const nargs = Number(fields[0]);
  const run = { args: fields.slice(1, 1 + nargs), env: fields.slice(1 + nargs) };
  // "got it": before any of the run's code (the box's parent waits for it)
  fs.writeSync(chan, 'g');
  fs.closeSync(chan);
  // the run's environment, in its order ("NAME=value" strings)
  for (const k of Object.keys(process.env)) delete process.env[k];
  for (const kv of run.env || []) {
    const i = kv.indexOf('=');
    if (i > 0) process.env[kv.slice(0, i)] = kv.slice(i + 1);
  }
  process.argv.splice(2, process.argv.length - 2, ...(run.args || []));
  delete require.cache[__filename];
  // (runMain itself, called on Module as Node calls it: the one frame
  // beneath the run's is Node's tick)
  process.nextTick(Module.runMain.bind(Module));
})();
