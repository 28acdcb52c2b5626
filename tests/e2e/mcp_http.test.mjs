// The official MCP SDK's Client over its Streamable HTTP transport, against
// a real `airlock serve`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { commonTests } from './mcp_common.mjs';
import { httpClient } from './util.mjs';

test('http: negotiates the SDK\'s latest protocol version and gets a session', async () => {
  const { client, transport } = await httpClient();
  assert.equal(transport.protocolVersion, LATEST_PROTOCOL_VERSION);
  assert.match(transport.sessionId, /^[0-9a-f]{32}$/);
  await transport.terminateSession();
  assert.equal(transport.sessionId, undefined);
  await client.close();
});

test('http: a wrong key is refused', async () => {
  await assert.rejects(httpClient('al_not_a_key'), /401|nauthorized/);
});

commonTests(httpClient, 'http');
