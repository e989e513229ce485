// An MCP server protected the way MCP authorization asks of a resource
// server: every request (POST, the standing GET stream, DELETE) must carry
// a bearer JWT from ISSUER (RFC 9068 `typ: at+jwt`, signed with a key of
// the issuer's published JWKS, not expired) whose `aud` is this server's
// own URL, `http://127.0.0.1:<port>/mcp`; anything else is answered 401
// with a Bearer challenge. Built with the official TypeScript SDK over
// Streamable HTTP, stateful sessions.
//
// Usage: node oauth_protected.mjs <port> <issuer>
//
// Tools: `echo` (answers `echo <message>`) and `seen`, which answers (as
// JSON text) what the server saw so far: `tokens` (how many distinct
// tokens it accepted), `refused` (how many requests it answered 401),
// `claims` (`aud`, `client_id`, `sub`, `scope` of the token that made this
// call) and `agentKeySeen` (whether any request carried a `rsk_live_`
// key in any header).
//
// On stderr: `listening <port>` once listening, `token <n>` for each new
// distinct token accepted, `refused <reason>` for each 401, `standing
// stream open` for each standing GET stream of a session.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [port, issuer] = process.argv.slice(2);
if (!port || !issuer) {
  process.stderr.write("usage: node oauth_protected.mjs <port> <issuer>\n");
  process.exit(2);
}
const resource = `http://127.0.0.1:${port}/mcp`;
const tokens = new Set();
const transports = new Map();
let refused = 0;
let agentKeySeen = false;
let keys;

// The issuer's key set, found through its discovery document.
async function keySet() {
  if (!keys) {
    const discovery = await fetch(`${issuer}/.well-known/openid-configuration`);
    if (!discovery.ok) throw new Error(`discovery answered ${discovery.status}`);
    const { jwks_uri: jwksUri } = await discovery.json();
    keys = createRemoteJWKSet(new URL(jwksUri));
  }
  return keys;
}

// The verified claims of the request's bearer token, or null (answered 401).
async function authorized(req, res) {
  const header = req.headers.authorization ?? "";
  const match = /^Bearer (\S+)$/.exec(header);
  let reason = "no bearer token";
  if (match) {
    try {
      const { payload } = await jwtVerify(match[1], await keySet(), {
        issuer,
        audience: resource,
        typ: "at+jwt",
      });
      if (!tokens.has(match[1])) {
        tokens.add(match[1]);
        process.stderr.write(`token ${tokens.size}\n`);
      }
      return payload;
    } catch (e) {
      reason = `${e.code ?? "error"}: ${e.message}`;
    }
  }
  refused += 1;
  process.stderr.write(`refused ${reason}\n`);
  res
    .writeHead(401, {
      "content-type": "application/json",
      "www-authenticate": `Bearer error="invalid_token", resource_metadata="${resource}"`,
    })
    .end(JSON.stringify({ error: "invalid_token" }));
  return null;
}

const text = (t) => ({ content: [{ type: "text", text: t }] });
const schema = { type: "object", properties: { message: { type: "string" } } };

function newServer(claimsOf) {
  const server = new Server({ name: "oauth-protected", version: "1" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      { name: "echo", description: "answers its message", inputSchema: schema },
      { name: "seen", description: "what the server saw", inputSchema: { type: "object" } },
    ],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    if (req.params.name === "seen") {
      const c = claimsOf(extra.sessionId);
      const claims = { aud: c.aud, client_id: c.client_id, sub: c.sub, scope: c.scope };
      return text(JSON.stringify({ tokens: tokens.size, refused, claims, agentKeySeen }));
    }
    return text(`echo ${req.params.arguments?.message ?? ""}`);
  });
  return server;
}

// The claims of the request being handled, by session.
const lastClaims = new Map();

http
  .createServer(async (req, res) => {
    if (!req.url.startsWith("/mcp")) {
      res.writeHead(404).end();
      return;
    }
    for (const value of Object.values(req.headers)) {
      if (String(value).includes("rsk_live_")) agentKeySeen = true;
    }
    const claims = await authorized(req, res);
    if (!claims) return;
    const sid = req.headers["mcp-session-id"];
    let transport = sid ? transports.get(sid) : undefined;
    if (sid) lastClaims.set(sid, claims);
    if (req.method === "GET" && transport) process.stderr.write("standing stream open\n");
    if (!transport) {
      if (sid || req.method !== "POST") {
        res.writeHead(404).end();
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
          transports.set(id, transport);
          lastClaims.set(id, claims);
        },
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await newServer((id) => lastClaims.get(id) ?? {}).connect(transport);
    }
    await transport.handleRequest(req, res);
  })
  .listen(Number(port), "127.0.0.1", () => process.stderr.write(`listening ${port}\n`));
