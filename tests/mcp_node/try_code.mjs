// One MCP `try_code` call through the TypeScript SDK v1, as an IDE agent makes it.
//
//   node try_code.mjs <mcp url> <token> <notebook> <code> <try timeout s> <request timeout ms> <reset 0|1>
//
// The SDK's default request timeout is 60 s (DEFAULT_REQUEST_TIMEOUT_MSEC): clients that
// pass resetTimeoutOnProgress keep a long call alive while the server sends progress.
// Prints one JSON line: {ok, elapsed_s, progress: [messages], result | error}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, token, notebook, code, tryTimeout, requestTimeout, reset] =
  process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `token ${token}` } }
});
const client = new Client({ name: 'ts-sdk-v1-test', version: '1.0.0' });
const progress = [];
const t0 = Date.now();
let out;
try {
  await client.connect(transport);
  const result = await client.callTool(
    {
      name: 'try_code',
      arguments: { notebook, code, timeout: Number(tryTimeout) }
    },
    CallToolResultSchema,
    {
      timeout: Number(requestTimeout),
      resetTimeoutOnProgress: reset === '1',
      onprogress: p => progress.push(p.message ?? String(p.progress))
    }
  );
  out = { ok: !result.isError, result: JSON.parse(result.content[0].text) };
} catch (error) {
  out = {
    ok: false,
    error: String(error?.message ?? error),
    code: error?.code ?? null
  };
}
out.elapsed_s = (Date.now() - t0) / 1000;
out.progress = progress;
process.stdout.write(JSON.stringify(out) + '\n');
await client.close().catch(() => {});
process.exit(0);
