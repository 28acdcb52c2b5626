// Approvals through MCP: in a workspace whose policy asks a person first, a
// call says that it waits, and returns when an approver decides over REST.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { env, httpClient, stdioClient, text } from './util.mjs';

async function rest(method, path, body) {
  const r = await fetch(env('AIRLOCK_URL') + path, {
    method,
    headers: { Authorization: `Bearer ${env('AIRLOCK_APPROVER_KEY')}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const doc = await r.json();
  assert.equal(r.status, 200, `${method} ${path}: ${JSON.stringify(doc)}`);
  return doc;
}

// Call code_execution; when the waiting notice arrives, DECIDE (approve or
// deny) as the approver. Returns [result, notices seen, progress seen].
async function callAndDecide(connect, code, decide) {
  const { client } = await connect(env('AIRLOCK_MEMBER_KEY'));
  const notices = [];
  const progress = [];
  let decided;
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    notices.push(n.params);
    const m = n.params.data?.message ?? '';
    if (/Waiting for a person to approve/.test(m) && !decided) {
      const runId = n.params.data.run_id;
      decided = rest('POST', `/v1/runs/${runId}/${decide}`, { reason: `${decide} by the e2e test` });
    }
  });
  const result = await client.callTool({ name: 'code_execution', arguments: { language: 'python', code, description: 'needs a person' } },
    undefined, { onprogress: (p) => progress.push(p) });
  assert.ok(decided, 'the call never said that it waits for approval');
  const run = await decided;
  await client.close();
  return [result, notices, progress, run];
}

for (const [label, connect] of [['http', httpClient], ['stdio', stdioClient]]) {
  test(`${label}: a call waits for approval, then runs when approved`, async () => {
    const [r, notices, progress, run] = await callAndDecide(connect, 'print("approved and ran")', 'approve');
    assert.equal(run.approval.decision, 'approved');
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /approved and ran/);
    const wait = notices.find((n) => n.data?.state === 'pending_approval');
    assert.ok(wait, JSON.stringify(notices));
    assert.ok(progress.some((p) => /Waiting for a person/.test(p.message)), JSON.stringify(progress));
    assert.ok(notices.some((n) => /was approved/.test(n.data?.message ?? '')), JSON.stringify(notices));
  });

  test(`${label}: a denied call is an error result saying so`, async () => {
    const [r] = await callAndDecide(connect, 'print("must not run")', 'deny');
    assert.equal(r.isError, true);
    assert.match(text(r), /denied/);
    assert.match(text(r), /deny by the e2e test/);
    assert.doesNotMatch(text(r), /must not run/);
  });
}
