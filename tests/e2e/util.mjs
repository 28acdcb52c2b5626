// Shared by the end-to-end tests: what the pytest wrapper (tests/integration/
// test_mcp.py) hands over in the environment, and small helpers. Nothing here
// fakes the service: every call goes to a real `airlock serve`.
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

export function env(name) {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run these tests through pytest (tests/integration/test_mcp.py)`);
  return v;
}

export async function httpClient(key = env('AIRLOCK_API_KEY')) {
  const client = new Client({ name: 'airlock-e2e', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(env('AIRLOCK_URL') + '/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return { client, transport };
}

export async function stdioClient(key = env('AIRLOCK_API_KEY')) {
  const client = new Client({ name: 'airlock-e2e-stdio', version: '1.0.0' });
  const transport = new StdioClientTransport({
    command: env('AIRLOCK_SERVER_BIN'),
    args: ['mcp', '--url', env('AIRLOCK_URL'), '--key', key],
    stderr: 'inherit',
  });
  await client.connect(transport);
  return { client, transport };
}

export function text(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// A valid 2x3 RGB PNG made with zlib and struct only: the host runtime has no
// matplotlib, and a chart is a PNG all the same.
export const PNG_PY = `
import struct, zlib, os
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
w, h = 2, 3
raw = b''.join(b'\\x00' + bytes([255, 0, 0] * w) for _ in range(h))
png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')
open('/out/chart.png', 'wb').write(png)
open('/out/notes.txt', 'w').write('rows: 3\\n')
print('chart written')
`;

export function pngSize(b64) {
  const buf = Buffer.from(b64, 'base64');
  assert.deepEqual([...buf.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'not a PNG');
  assert.equal(buf.subarray(12, 16).toString('latin1'), 'IHDR');
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) };
}

// `airlock mcp --local`: no service given; it starts a private one.
export async function localClient() {
  const client = new Client({ name: 'airlock-e2e-local', version: '1.0.0' });
  const transport = new StdioClientTransport({
    command: env('AIRLOCK_SERVER_BIN'),
    args: ['mcp', '--local', '--state', env('AIRLOCK_LOCAL_STATE')],
    stderr: 'inherit',
  });
  await client.connect(transport);
  return { client, transport };
}
