// The official MCP TypeScript SDK client, given only a person's project URL
// on the gateway, signing in through the SDK's OAuth support.
// Usage: node ts_oauth_client.mjs <project URL> <user> [remember]
//
// The SDK meets the gateway's 401 challenge, reads the protected-resource
// metadata, discovers the identity provider, registers itself (dynamic
// client registration) and asks the provider to authorize it with PKCE and
// the RFC 8707 resource. A person would sign in in a browser; here the
// provider's test sign-in answers for the user named in `login_hint`, and
// this script follows the redirects with a cookie jar until the redirect
// URI, then hands the code back to the SDK. It then lists the tools,
// recalls memories (allowed) and, with `remember`, stores one: when the
// gateway answers 403 `insufficient_scope` the SDK asks the provider for
// the challenge's scopes (step-up), the person signs in again and the call
// is retried. It prints one JSON summary line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, user, then] = process.argv.slice(2);
const redirectUrl = "http://127.0.0.1:49153/callback";

/** An OAuthClientProvider that keeps everything in memory. */
class HeadlessProvider {
  constructor() {
    this.saved = {};
  }
  get redirectUrl() {
    return redirectUrl;
  }
  get clientMetadata() {
    return {
      client_name: "cedargate-ts-oauth-test",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
      application_type: "native",
    };
  }
  clientInformation() {
    return this.saved.client;
  }
  saveClientInformation(info) {
    this.saved.client = info;
  }
  tokens() {
    return this.saved.tokens;
  }
  saveTokens(tokens) {
    this.saved.tokens = tokens;
  }
  redirectToAuthorization(authorizationUrl) {
    this.authorizationUrl = authorizationUrl;
  }
  saveCodeVerifier(verifier) {
    this.saved.verifier = verifier;
  }
  codeVerifier() {
    return this.saved.verifier;
  }
}

/** Follows the provider's redirects (with its cookies) to the redirect URI. */
async function signIn(authorizationUrl) {
  const start = new URL(authorizationUrl);
  start.searchParams.set("login_hint", user);
  let next = start.href;
  const cookies = new Map();
  for (let hop = 0; hop < 20; hop++) {
    const headers = { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join("; ") };
    const resp = await fetch(next, { redirect: "manual", headers });
    for (const c of resp.headers.getSetCookie()) {
      const [pair] = c.split(";");
      const i = pair.indexOf("=");
      cookies.set(pair.slice(0, i), pair.slice(i + 1));
    }
    const location = resp.headers.get("location");
    if (!location) {
      throw new Error(`sign-in stopped at ${next}: HTTP ${resp.status} ${await resp.text()}`);
    }
    const target = new URL(location, next);
    if (target.href.startsWith(redirectUrl)) {
      const code = target.searchParams.get("code");
      if (!code) throw new Error(`no code: ${target.href}`);
      return code;
    }
    next = target.href;
  }
  throw new Error("too many redirects");
}

const provider = new HeadlessProvider();
const summary = {};
let transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
const client = new Client({ name: "cedargate-ts-oauth-test", version: "1.0.0" });
try {
  await client.connect(transport);
  summary.signedInBefore = true;
} catch (e) {
  if (!(e instanceof UnauthorizedError)) throw e;
  summary.challenged = true;
  summary.authorizationServer = new URL(provider.authorizationUrl).origin;
  summary.resource = new URL(provider.authorizationUrl).searchParams.get("resource");
  await transport.finishAuth(await signIn(provider.authorizationUrl));
  transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  await client.connect(transport);
}
summary.registeredClient = provider.saved.client?.client_id ?? null;
summary.grantedScope = provider.saved.tokens?.scope ?? null;
summary.sessionId = transport.sessionId ?? null;
summary.tools = (await client.listTools()).tools.map((t) => t.name);
const recalled = await client.callTool({
  name: "af_memory_recall",
  arguments: { query: "anything", workType: "feature" },
});
summary.recall = { isError: recalled.isError ?? false };
if (then === "remember") {
  const remember = () =>
    client.callTool({ name: "af_memory_remember", arguments: { content: `${user} stepped up` } });
  let stored;
  try {
    stored = await remember();
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
    summary.stepUpScope = new URL(provider.authorizationUrl).searchParams.get("scope");
    await transport.finishAuth(await signIn(provider.authorizationUrl));
    stored = await remember();
  }
  summary.remember = { isError: stored.isError ?? false };
}
await client.close();
console.log(JSON.stringify(summary));
