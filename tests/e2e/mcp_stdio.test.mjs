// The official MCP SDK's Client over its stdio transport, against
// `airlock mcp` forwarding to a real `airlock serve`.
import { commonTests } from './mcp_common.mjs';
import { stdioClient } from './util.mjs';

commonTests(stdioClient, 'stdio');
