// Preloaded into a Node client (NODE_OPTIONS=--import=…/wiretap.mjs) to
// record every JSON body it receives through fetch, one line per response,
// into $WIRETAP_FILE. Used for clients whose own output leaves out the
// JSON-RPC error code (the MCP Inspector CLI prints only the message).
import { appendFileSync } from "node:fs";

const file = process.env.WIRETAP_FILE;
const realFetch = globalThis.fetch;
if (file && realFetch) {
  globalThis.fetch = async (input, init) => {
    const response = await realFetch(input, init);
    const type = response.headers.get("content-type") ?? "";
    if (type.startsWith("application/json")) {
      const text = await response.clone().text();
      const method = init?.method ?? "GET";
      appendFileSync(file, JSON.stringify({ method, status: response.status, body: text }) + "\n");
    }
    return response;
  };
}
