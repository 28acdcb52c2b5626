// The E2B SDK (e2b 2.51.0), unchanged, running commands on a real `airlock
// serve` (tests/integration/test_e2b_commands.py hands over its URL and
// keys): each commands.run is one airlock run in the sandbox's working
// directory, streamed back over envd's Connect protocol.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CommandExitError, Sandbox, TimeoutError } from 'e2b';
import { env } from './util.mjs';

const url = env('AIRLOCK_URL');
const opts = (key = env('AIRLOCK_API_KEY')) => ({ apiUrl: url, sandboxUrl: url, apiKey: key });

async function rest(key, method, path, body) {
  const res = await fetch(url + path, {
    method, headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, doc: text ? JSON.parse(text) : null };
}

test('run streams its output; envs, cwd; a failure is CommandExitError; files flow between commands', async () => {
  const sbx = await Sandbox.create('base', { ...opts(), envs: { FROM_SANDBOX: 'sb', BOTH: 'sandbox' } });
  try {
    const seen = [];
    const r = await sbx.commands.run('echo hi; echo oops >&2', { onStdout: (d) => seen.push(d) });
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hi\n');
    assert.equal(r.stderr, 'oops\n');
    assert.deepEqual(seen, ['hi\n']);
    // the sandbox's envVars, the command's envs over them, what every sandbox says of itself
    const e = await sbx.commands.run('echo "$FROM_SANDBOX $BOTH $FROM_CMD $E2B_SANDBOX $E2B_SANDBOX_ID $HOME $PWD"',
      { envs: { BOTH: 'command', FROM_CMD: 'c' } });
    assert.equal(e.stdout, `sb command c true ${sbx.sandboxId} /work /work\n`);
    // what one command writes the next reads, and files.read sees; deleted is gone
    await sbx.commands.run('mkdir -p sub && echo one > sub/a.txt && echo two > b.txt && echo keep > c.txt');
    assert.equal(await sbx.files.read('/home/user/sub/a.txt'), 'one\n');
    const cat = await sbx.commands.run('cat sub/a.txt b.txt && pwd', { cwd: '/home/user' });
    assert.equal(cat.stdout, 'one\ntwo\n/work\n');
    const sub = await sbx.commands.run('pwd; ls', { cwd: '/home/user/sub' });
    assert.equal(sub.stdout, '/work/sub\na.txt\n');
    await sbx.commands.run('rm b.txt');
    assert.equal(await sbx.files.exists('/home/user/b.txt'), false);
    assert.equal(await sbx.files.read('/home/user/c.txt'), 'keep\n');
    // a tree of more files than a run's artifacts (100) comes back whole
    // (listed from inside: gVisor here answers statx, so `ls PATH`, EINVAL)
    await sbx.commands.run('mkdir many && for i in $(seq 150); do echo $i > many/$i; done');
    assert.equal((await sbx.commands.run('cd many && ls | wc -l; cat 150')).stdout, '150\n150\n');
    // a file written through the files API is the next command's
    await sbx.files.write('/home/user/in.py', 'print(6 * 7)\n');
    assert.equal((await sbx.commands.run('python3 in.py')).stdout, '42\n');
    // a non-zero exit
    await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, String(err));
      assert.equal(err.exitCode, 3);
      assert.equal(err.stdout, 'partial\n');
      assert.equal(err.stderr, 'bad\n');
      return true;
    });
    // a path a sandbox does not keep is refused, saying which it keeps
    await assert.rejects(sbx.commands.run('pwd', { cwd: '/etc' }), /only \/home\/user/);
  } finally {
    await sbx.kill();
  }
});

test('timeoutMs ends a command with TimeoutError; background commands are listed and killed', async () => {
  const sbx = await Sandbox.create('base', opts());
  try {
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run('sleep 20', { timeoutMs: 1500 }), (err) => err instanceof TimeoutError);
    assert.ok(Date.now() - t0 < 10_000, `the timeout took ${Date.now() - t0} ms`);
    const h = await sbx.commands.run('echo started; sleep 30', { background: true });
    assert.ok(h.pid > 0);
    // its output arrives while it runs
    for (let i = 0; i < 100 && !h.stdout; i++) await new Promise((res) => setTimeout(res, 100));
    assert.equal(h.stdout, 'started\n');
    const list = await sbx.commands.list();
    const mine = list.find((p) => p.pid === h.pid);
    assert.ok(mine, `pid ${h.pid} not in ${JSON.stringify(list)}`);
    assert.equal(mine.cmd, '/bin/bash');
    // another client re-attaches by pid, and sees its end too
    const again = await sbx.commands.connect(h.pid);
    assert.equal(await sbx.commands.kill(h.pid), true);
    await assert.rejects(h.wait(), (err) => err instanceof CommandExitError && err.exitCode === -1);
    await assert.rejects(again.wait(), (err) => err instanceof CommandExitError && err.exitCode === -1);
    assert.equal((await sbx.commands.list()).some((p) => p.pid === h.pid), false);
    assert.equal(await sbx.commands.kill(h.pid), false);
  } finally {
    await sbx.kill();
  }
});

test('each command is an airlock run: of the sandbox thread, charged, audited via e2b', async () => {
  const key = env('AIRLOCK_API_KEY');
  const sbx = await Sandbox.create('base', opts());
  try {
    // a script made executable runs in the next command (the exec bit is kept)
    await sbx.commands.run('printf "#!/bin/sh\\necho script\\n" > s.sh && chmod +x s.sh', { timeoutMs: 5000 });
    assert.equal((await sbx.commands.run('./s.sh', { timeoutMs: 0 })).stdout, 'script\n');
    const { doc } = await rest(key, 'GET', `/v1/runs?thread_id=e2b-${sbx.sandboxId}`);
    const runs = doc.runs ?? doc.data ?? doc;
    assert.equal(runs.length, 2, JSON.stringify(doc));
    // timeoutMs is the run's timeout (a second past the stream's deadline);
    // none is the workspace's longest
    const settings = (await rest(key, 'GET', '/v1/settings')).doc;
    assert.deepEqual(runs.map((r) => r.limits.timeout_s).sort((a, b) => a - b), [6, settings.max_timeout_s]);
    const usage = (await rest(key, 'GET', '/v1/usage')).doc;
    for (const run of runs) {
      assert.equal(run.language, 'bash');
      assert.equal(run.state, 'succeeded');
      const charged = usage.ledger.filter((l) => l.run_id === run.id && l.kind === 'charge');
      assert.equal(charged.length, 1, `run ${run.id} charged ${JSON.stringify(charged)}`);
      const audit = (await rest(key, 'GET', `/v1/audit?kind=tool.call&run_id=${run.id}`)).doc.events;
      assert.equal(audit.length, 1, JSON.stringify(audit));
      assert.equal(audit[0].data.via, 'e2b');
    }
  } finally {
    await sbx.kill();
  }
});

test('in a workspace that asks for approval, a command waits, then runs once approved', async () => {
  const key = env('AIRLOCK_APPROVAL_KEY');
  const sbx = await Sandbox.create('base', opts(key));
  try {
    const out = [];
    const pending = sbx.commands.run('echo approved > proof.txt; echo ran', { onStdout: (d) => out.push(d) });
    let run;
    for (let i = 0; i < 100 && !run; i++) {
      const { doc } = await rest(key, 'GET', `/v1/runs?thread_id=e2b-${sbx.sandboxId}&state=pending_approval`);
      run = (doc.runs ?? doc.data ?? doc)[0];
      if (!run) await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(run, 'the command never awaited approval');
    assert.deepEqual(out, []);
    const a = await rest(key, 'POST', `/v1/runs/${run.id}/approve`, {});
    assert.ok(a.status === 200 || a.status === 202, JSON.stringify(a));
    const r = await pending;
    assert.equal(r.stdout, 'ran\n');
    assert.equal(await sbx.files.read('/home/user/proof.txt'), 'approved\n');
    // denied: the command ends with the approver's no
    // (the rejection is awaited from the start: it comes while the deny is answered)
    const denied = assert.rejects(sbx.commands.run('echo never'), (err) => err instanceof CommandExitError &&
      /^denied by an approver: not today$/.test(err.message) && err.exitCode === -1 && err.stdout === '');
    let run2;
    for (let i = 0; i < 100 && !run2; i++) {
      const { doc } = await rest(key, 'GET', `/v1/runs?thread_id=e2b-${sbx.sandboxId}&state=pending_approval`);
      run2 = (doc.runs ?? doc.data ?? doc)[0];
      if (!run2) await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(run2);
    await rest(key, 'POST', `/v1/runs/${run2.id}/deny`, { reason: 'not today' });
    await denied;
  } finally {
    await sbx.kill();
  }
});
