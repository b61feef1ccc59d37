// The MCP TypeScript SDK's WebSocketClientTransport, as a stock client uses it: it cannot send
// headers, so it first mints a single-use ticket with its credential, then connects with the
// ticket in the URL, lists the tools, calls one and reads a resource.
//
//   COREMETRY_TOKEN=<bearer token> node ws_ticket_client.mjs <base URL>
//   -> one JSON line on stdout: {"tools": [...names], "echo": <text>, "server": {...}}
// A refused connection ends the program with status 1 and the error on stderr.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';

const base = process.argv[2];
const response = await fetch(`${base}/api/mcp/ws-ticket`, {
  method: 'POST',
  headers: { authorization: `Bearer ${process.env.COREMETRY_TOKEN}` },
});
if (response.status !== 200) {
  throw new Error(`minting a ticket answered ${response.status}: ${await response.text()}`);
}
const { url } = await response.json();
const client = new Client({ name: 'ws-ticket-e2e', version: '0.0.0' });
await client.connect(new WebSocketClientTransport(new URL(url)));
const tools = (await client.listTools()).tools.map((tool) => tool.name);
const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello over a ticket' } });
const server = await client.readResource({ uri: 'coremetry://server' });
process.stdout.write(`${JSON.stringify({
  tools,
  echo: echo.content[0].text,
  server: JSON.parse(server.contents[0].text),
})}\n`);
await client.close();
// A reused ticket: the same URL again is refused at the handshake.
const again = new Client({ name: 'ws-ticket-e2e-reuse', version: '0.0.0' });
try {
  await again.connect(new WebSocketClientTransport(new URL(url)));
  process.stdout.write(`${JSON.stringify({ reuse: 'connected' })}\n`);
} catch (error) {
  process.stdout.write(`${JSON.stringify({ reuse: 'refused' })}\n`);
}
process.exit(0);
