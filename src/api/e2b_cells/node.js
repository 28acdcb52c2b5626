// The code interpreter's JavaScript cell, run as an airlock run
// (src/api/e2b_execute.c); the service puts one line above this:
// const _AIRLOCK = "<base64 of JSON>". As python.py: results leave on
// stdout as "<mark><JSON>\n" lines; nothing of an earlier cell is kept.
'use strict';
const _A = JSON.parse(Buffer.from(_AIRLOCK, 'base64').toString('utf8'));
Object.assign(process.env, _A.env);
const vm = require('vm');
const util = require('util');

function emit(doc) {
  process.stdout.write(_A.mark + JSON.stringify(doc) + '\n');
}

globalThis.require = require;
let value;
try {
  // the completion value of the cell's last statement is its value, as
  // a notebook's JavaScript kernel shows it
  value = vm.runInThisContext(_A.cell, { filename: '<cell>' });
} catch (e) {
  const err = e instanceof Error ? e : new Error(String(e));
  // as python.py: a name of an earlier cell is not here, and the error says why
  const note = err instanceof ReferenceError
    ? ' (airlock: each runCode call runs in a fresh interpreter; variables, modules and' +
      ' processes of earlier calls are not kept, files under /home/user are)'
    : '';
  emit({ type: 'error', name: err.name, value: err.message + note, traceback: err.stack || String(e) });
  value = undefined;
}
if (value !== undefined) {
  emit({ type: 'result', text: typeof value === 'string' ? value : util.inspect(value), is_main_result: true });
}
