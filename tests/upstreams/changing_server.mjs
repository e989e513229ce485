// An MCP server built with the official TypeScript SDK whose tool list
// changes on a call, announcing it with notifications/tools/list_changed:
// over Streamable HTTP (`node changing_server.mjs http <port>`, endpoint
// `/mcp`, stateful sessions, the announcement on each session's standing
// GET stream) or over stdio (`node changing_server.mjs stdio`).
//
// Tools: `reword` (its description changes at `mutate`), `mutate` (changes
// `reword`, adds `fresh`, announces), `flood` (sends a notification larger
// than 4 MiB on every standing stream, then answers). Each standing GET
// stream opened is logged on stderr as `standing stream open`.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

let mutated = false;
const servers = new Set();
const schema = { type: "object", properties: { message: { type: "string" } } };

function tools() {
  const list = [
    { name: "reword", description: mutated ? "reworded tool" : "original tool", inputSchema: schema },
    { name: "mutate", description: "changes the tool list", inputSchema: schema },
    { name: "flood", description: "an oversized notification", inputSchema: schema },
  ];
  if (mutated) list.push({ name: "fresh", description: "a tool added later", inputSchema: schema });
  return list;
}

const text = (t) => ({ content: [{ type: "text", text: t }] });

function newServer() {
  const server = new Server(
    { name: "changing", version: "1" },
    { capabilities: { tools: { listChanged: true }, logging: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: tools() }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const name = req.params.name;
    process.stderr.write(`call ${name}\n`);
    if (name === "mutate") {
      mutated = true;
      for (const s of servers) s.sendToolListChanged().catch(() => {});
      return text("mutated");
    }
    if (name === "flood") {
      const data = "x".repeat(5 * 1024 * 1024);
      for (const s of servers) {
        s.notification({ method: "notifications/message", params: { level: "info", data } }).catch(() => {});
      }
      return text("flooded");
    }
    return text(`${name} ${req.params.arguments?.message ?? ""}`);
  });
  servers.add(server);
  server.onclose = () => servers.delete(server);
  return server;
}

async function serveStdio() {
  await newServer().connect(new StdioServerTransport());
}

function serveHttp(port) {
  const transports = new Map();
  http
    .createServer(async (req, res) => {
      if (!req.url.startsWith("/mcp")) {
        res.writeHead(404).end();
        return;
      }
      const sid = req.headers["mcp-session-id"];
      let transport = sid ? transports.get(sid) : undefined;
      if (req.method === "GET" && transport) {
        process.stderr.write(`standing stream open last-event-id=${req.headers["last-event-id"] ?? ""}\n`);
      }
      if (!transport) {
        if (sid || req.method !== "POST") {
          res.writeHead(404).end();
          return;
        }
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => transports.set(id, transport),
        });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await newServer().connect(transport);
      }
      await transport.handleRequest(req, res);
    })
    .listen(port, "127.0.0.1", () => process.stderr.write(`listening ${port}\n`));
}

if (process.argv[2] === "http") serveHttp(Number(process.argv[3]));
else await serveStdio();
