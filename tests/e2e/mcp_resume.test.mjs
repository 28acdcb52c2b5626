// The official SDK's StreamableHTTPClientTransport resuming a tools/call
// whose event stream broke, against a real `airlock serve`: the network is
// cut (the response body errors and its connection is aborted) after the
// second line of output; the transport reconnects with GET /mcp and
// Last-Event-ID by itself, and callTool resolves with the result.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { env, text } from './util.mjs';

const CODE = 'import time\nfor i in range(1, 9):\n    print(f"line{i}", flush=True)\n    time.sleep(0.4)\n';
const WANT = [1, 2, 3, 4, 5, 6, 7, 8].map((i) => `line${i}\n`).join('');

// A fetch that cuts the first tools/call stream once CUT_AFTER went by, and
// notes every GET (a resumption) with its Last-Event-ID.
function cuttingFetch(log) {
  let cut = false;
  return async (url, init) => {
    const res = await fetch(url, init);
    const method = init?.method ?? 'GET';
    if (method === 'GET') {
      log.gets.push({ status: res.status, lastEventId: new Headers(init?.headers).get('last-event-id') });
      return res;
    }
    const isCall = typeof init?.body === 'string' && init.body.includes('"tools/call"');
    if (!isCall || cut || !res.body || !(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      return res;
    }
    cut = true;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let seen = '';
    const body = new ReadableStream({
      async pull(controller) {
        const { value, done } = await reader.read();
        if (done) {
          controller.close();
          return;
        }
        controller.enqueue(value);
        seen += decoder.decode(value, { stream: true });
        if (seen.includes('line2')) {
          log.cutAfter = seen;
          await reader.cancel('the network went away');
          controller.error(new Error('the network went away'));
        }
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

async function resumedCall(reconnectDelayMs) {
  const log = { gets: [], cutAfter: null };
  const client = new Client({ name: 'airlock-e2e-resume', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(env('AIRLOCK_URL') + '/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${env('AIRLOCK_API_KEY')}` } },
    fetch: cuttingFetch(log),
    reconnectionOptions: { initialReconnectionDelay: reconnectDelayMs, maxReconnectionDelay: 30000,
      reconnectionDelayGrowFactor: 1.5, maxRetries: 3 },
  });
  const errors = [];
  await client.connect(transport);
  transport.onerror = (e) => errors.push(String(e));
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params); });
  const r = await client.callTool({ name: 'code_execution', arguments: { language: 'python', code: CODE } },
    undefined, { timeout: 60000 });
  await transport.terminateSession();
  await client.close();
  return { r, log, logs, errors };
}

function checkResumed({ r, log, logs, errors }) {
  assert.ok(log.cutAfter, 'the stream was never cut');
  assert.match(log.cutAfter, /^id: \d+-0\n/, 'no priming event opened the stream');
  assert.ok(errors.some((e) => /SSE stream disconnected/.test(e)), `the cut went unnoticed: ${errors}`);
  const resumes = log.gets.filter((g) => g.lastEventId);
  assert.ok(resumes.length >= 1, `the transport never resumed: ${JSON.stringify(log.gets)}`);
  assert.equal(resumes.at(-1).status, 200);
  assert.match(resumes[0].lastEventId, /^\d+-\d+$/);
  assert.equal(r.isError, false, text(r));
  assert.equal(r.structuredContent.state, 'succeeded');
  assert.match(text(r), /line8/);
  // every line once: what came before the cut and what the resumption replayed
  assert.equal(logs.filter((l) => l.logger === 'stdout').map((l) => l.data).join(''), WANT);
}

test('resume: a stream cut mid-run is resumed with Last-Event-ID and the call returns its result', async () => {
  checkResumed(await resumedCall(200));
});

test('resume: a stream resumed only after the run ended still gets the rest and the result', async () => {
  checkResumed(await resumedCall(5000));
});
