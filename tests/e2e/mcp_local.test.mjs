// The official MCP SDK's Client over stdio against `airlock mcp --local`,
// which starts a private service of its own: the same tools, no setup.
import { commonTests } from './mcp_common.mjs';
import { localClient } from './util.mjs';

commonTests(localClient, 'local');
