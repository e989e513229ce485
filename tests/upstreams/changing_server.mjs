// An MCP server built with the official TypeScript SDK whose tool list
// changes on a call, announcing it with notifications/tools/list_changed:
// over Streamable HTTP (`node changing_server.mjs http <port>`, endpoint
// `/mcp`, stateful sessions, the announcement on each session's standing
// GET stream) or over stdio (`node changing_server.mjs stdio`).
// `http-resumable <port> <retryMs>` keeps events for replay (the SDK's
// EventStore interface, numbering each event; the SDK's example store
// cannot resume its standalone stream, whose id `_GET_stream` it splits
// on `_`) and sends a `retry`
// field ahead of the first event of each standing stream (this SDK
// version names `retry` on POST streams only); `http-noget
// <port>` answers 405 to every GET (no standing stream offered).
//
// Tools: `reword` (its description changes at `mutate`), `mutate` (changes
// `reword`, adds `fresh`, announces), `reprompt` (adds the prompt `later`
// beside `first`, announcing notifications/prompts/list_changed), `flood` (sends a notification larger
// than 4 MiB on every standing stream, then answers), `note` (a small
// notification on every standing stream), `drop` (closes every standing
// stream), `expire` (ends every session just after answering: later
// requests with its id get 404). On stderr: `standing stream open last-event-id=<id>`
// for each standing GET stream, `standing stream closed` when one ends,
// `GET refused` for each 405, `GET expired` for each 404 to a GET.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListToolsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

let mutated = false;
let reprompted = false;
const servers = new Set();
const transports = new Map();
const schema = { type: "object", properties: { message: { type: "string" } } };

function tools() {
  const list = [
    { name: "reword", description: mutated ? "reworded tool" : "original tool", inputSchema: schema },
    { name: "mutate", description: "changes the tool list", inputSchema: schema },
    { name: "flood", description: "an oversized notification", inputSchema: schema },
    { name: "drop", description: "closes the standing streams", inputSchema: schema },
    { name: "note", description: "a small notification", inputSchema: schema },
    { name: "expire", description: "ends every session", inputSchema: schema },
    { name: "reprompt", description: "adds a prompt", inputSchema: schema },
  ];
  if (mutated) list.push({ name: "fresh", description: "a tool added later", inputSchema: schema });
  return list;
}

// Events kept for replay, numbered in order.
class EventStore {
  constructor() {
    this.events = [];
  }
  async storeEvent(streamId, message) {
    const id = String(this.events.length + 1);
    this.events.push({ id, streamId, message });
    return id;
  }
  async getStreamIdForEventId(id) {
    return this.events.find((e) => e.id === id)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) return "";
    const { streamId } = this.events[at];
    for (const e of this.events.slice(at + 1)) {
      if (e.streamId === streamId) await send(e.id, e.message);
    }
    return streamId;
  }
}

const text = (t) => ({ content: [{ type: "text", text: t }] });

function newServer() {
  const server = new Server(
    { name: "changing", version: "1" },
    { capabilities: { tools: { listChanged: true }, prompts: { listChanged: true }, logging: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: tools() }));
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: [{ name: "first" }, ...(reprompted ? [{ name: "later" }] : [])],
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => ({
    messages: [{ role: "user", content: { type: "text", text: req.params.name } }],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const name = req.params.name;
    process.stderr.write(`call ${name}\n`);
    if (name === "mutate") {
      mutated = true;
      for (const s of servers) s.sendToolListChanged().catch(() => {});
      return text("mutated");
    }
    if (name === "reprompt") {
      reprompted = true;
      for (const s of servers) s.sendPromptListChanged().catch(() => {});
      return text("reprompted");
    }
    if (name === "flood") {
      const data = "x".repeat(5 * 1024 * 1024);
      for (const s of servers) {
        s.notification({ method: "notifications/message", params: { level: "info", data } }).catch(() => {});
      }
      return text("flooded");
    }
    if (name === "note") {
      for (const s of servers) {
        s.notification({ method: "notifications/message", params: { level: "info", data: "note" } }).catch(() => {});
      }
      return text("noted");
    }
    if (name === "expire") {
      setTimeout(() => {
        for (const [id, t] of transports) {
          transports.delete(id);
          t.close();
        }
      }, 50);
      return text("expiring");
    }
    if (name === "drop") {
      for (const t of transports.values()) t.closeStandaloneSSEStream();
      return text("dropped");
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

function serveHttp(port, mode, retryMs) {
  http
    .createServer(async (req, res) => {
      if (!req.url.startsWith("/mcp")) {
        res.writeHead(404).end();
        return;
      }
      const sid = req.headers["mcp-session-id"];
      let transport = sid ? transports.get(sid) : undefined;
      if (req.method === "GET" && mode === "http-noget") {
        process.stderr.write("GET refused\n");
        res.writeHead(405, { Allow: "POST, DELETE" }).end();
        return;
      }
      if (req.method === "GET" && transport) {
        process.stderr.write(`standing stream open last-event-id=${req.headers["last-event-id"] ?? ""}\n`);
        res.on("close", () => process.stderr.write("standing stream closed\n"));
        if (mode === "http-resumable") {
          const write = res.write.bind(res);
          let first = true;
          res.write = (chunk, ...rest) => {
            if (first) {
              first = false;
              write(`retry: ${retryMs}\n\n`);
            }
            return write(chunk, ...rest);
          };
        }
      }
      if (!transport) {
        if (sid || req.method !== "POST") {
          if (req.method === "GET") process.stderr.write("GET expired\n");
          res.writeHead(404).end();
          return;
        }
        const resumable =
          mode === "http-resumable"
            ? { eventStore: new EventStore(), retryInterval: retryMs }
            : {};
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => transports.set(id, transport),
          ...resumable,
        });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await newServer().connect(transport);
      }
      await transport.handleRequest(req, res);
    })
    .listen(port, "127.0.0.1", () => process.stderr.write(`listening ${port}\n`));
}

const [mode, port, retryMs] = process.argv.slice(2);
if (mode.startsWith("http")) serveHttp(Number(port), mode, Number(retryMs));
else await serveStdio();
