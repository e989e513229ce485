// The official MCP TypeScript SDK client against a running gateway.
// Usage: node ts_client.mjs <http|sse> <session URL> <bearer key>
// Initializes, lists tools, stores an observation (allowed), recalls
// (denied by the test's policy) and prints one JSON summary line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";

const [transportName, url, key] = process.argv.slice(2);
const requestInit = { headers: { Authorization: `Bearer ${key}` } };
const transport =
  transportName === "sse"
    ? new SSEClientTransport(new URL(`${url}/sse`), { requestInit })
    : new StreamableHTTPClientTransport(new URL(url), { requestInit });

const client = new Client({ name: "cedargate-ts-test", version: "1.0.0" });
await client.connect(transport);
const summary = {
  transport: transportName,
  protocolVersion: transport.protocolVersion ?? transport._protocolVersion ?? null,
  serverInfo: client.getServerVersion(),
  sessionId: transport.sessionId ?? null,
};
summary.tools = (await client.listTools()).tools.map((t) => t.name);
const stored = await client.callTool({
  name: "af_memory_remember",
  arguments: { content: `typescript ${transportName} client was here`, type: "pattern" },
});
summary.remember = {
  isError: stored.isError ?? false,
  text: stored.content?.[0]?.text ?? null,
  structured: stored.structuredContent ?? null,
};
try {
  const r = await client.callTool({
    name: "af_memory_recall",
    arguments: { query: "typescript client", workType: "feature" },
  });
  summary.recall = { unexpected: r };
} catch (e) {
  summary.recall = { code: e.code ?? null, message: e.message, data: e.data ?? null };
}
if (transportName === "http") {
  // Ends the MCP session with DELETE, as clients do on exit.
  await transport.terminateSession();
  summary.terminated = transport.sessionId === undefined;
}
await client.close();
console.log(JSON.stringify(summary));
