// A tiny MCP server over stdio for the gateway's stdio tests: tools that
// answer, crash, hang, write garbage or a line over the answer bound, show
// their environment, and count how many calls run at once. Each call is
// logged on stderr as `call <tool>`.
import readline from "node:readline";

const names = ["echo", "crash", "hang", "garbage", "big", "env", "sleep", "shout"];
const tools = names.map((name) => ({
  name,
  description: `fixture ${name}`,
  inputSchema: {
    type: "object",
    properties: { message: { type: "string" }, ms: { type: "integer" } },
  },
}));
const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
const text = (t) => ({ content: [{ type: "text", text: t }] });
let inFlight = 0;
let maxInFlight = 0;

readline.createInterface({ input: process.stdin }).on("line", async (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  if (m.method === "initialize") {
    return send({
      id: m.id,
      result: {
        protocolVersion: "2025-06-18",
        capabilities: { tools: {} },
        serverInfo: { name: "fixture", version: "1" },
      },
    });
  }
  if (m.method === "tools/list") return send({ id: m.id, result: { tools } });
  if (m.method !== "tools/call") {
    return send({ id: m.id, error: { code: -32601, message: "unknown method" } });
  }
  const { name, arguments: args = {} } = m.params;
  process.stderr.write(`call ${name}\n`);
  switch (name) {
    case "echo":
      return send({ id: m.id, result: text(`echo ${args.message ?? ""}`) });
    case "crash":
      process.exit(3);
    case "hang":
      return;
    case "garbage":
      process.stdout.write("this is not JSON-RPC\n");
      return;
    case "big":
      return send({ id: m.id, result: text("x".repeat(5 * 1024 * 1024)) });
    case "env":
      return send({ id: m.id, result: text(JSON.stringify(Object.keys(process.env).sort())) });
    case "sleep":
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise((r) => setTimeout(r, args.ms ?? 100));
      inFlight -= 1;
      return send({ id: m.id, result: text(String(maxInFlight)) });
    case "shout":
      process.stderr.write("y".repeat(5000) + "\n");
      return send({ id: m.id, result: text("shouted") });
    default:
      return send({ id: m.id, error: { code: -32602, message: `no tool ${name}` } });
  }
});
