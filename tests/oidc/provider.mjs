// A real OpenID Connect provider for cedargate's OAuth tests: panva's
// `oidc-provider` (OpenID Certified), configured as a company IdP that
// issues access tokens for MCP resource servers.
//
// Usage: node provider.mjs INFO_FILE [CONFIG_FILE]
//
// Listens on 127.0.0.1 and, once listening, writes
// `{"issuer": "http://127.0.0.1:PORT", "port": PORT}` to INFO_FILE (written
// to a temporary name and renamed, so a reader never sees half of it).
// CONFIG_FILE is an optional JSON object; every key is optional and an
// unknown key is refused:
//
// - `port` (number, default 0 = any free port): a fixed port lets a test
//   stop the provider and start it again on the same issuer.
// - `keysFile` (path, default INFO_FILE + ".jwks.json"): the private JWKS.
//   Generated (one ES256 key) at first start when absent; a restart over the
//   same file serves the same keys. New tokens are signed with the first key;
//   every key in the file is published at `jwks_uri`.
// - `accessTokenTtl` (seconds, default 3600): lifetime of access tokens.
// - `resourcePrefixes` (array of strings, default ["http://127.0.0.1:"]): a
//   `resource` (RFC 8707) must start with one of them, else `invalid_target`.
// - `opaqueResourcePrefix` (string, default none): tokens for a resource
//   starting with it are opaque (for RFC 7662 introspection); tokens for any
//   other resource are RFC 9068 JWTs (`typ: at+jwt`, ES256, `aud` = the
//   resource). The opaque prefix is allowed even outside `resourcePrefixes`.
// - `consoleRedirectUris` (array, default ["http://127.0.0.1/console/callback"]):
//   the `cg-console` client's redirect URIs (exact match: a web client).
// - `serviceSecret` (string, default "cg-service-secret"): the secret of the
//   `cg-service` client (a test whose gateway reads it from a variable of
//   its own environment gives that variable's value).
// - `loginPage` (boolean, default false): when false, every sign-in is
//   answered without a browser, for the user named by the authorization
//   request's `login_hint` (alice when absent). When true, a request without
//   `login_hint` shows an HTML form (a `username` field and a "Sign in"
//   button) that signs that user in; with `login_hint` it stays headless.
//
// Scopes: OpenID's, `mcp:read mcp:tools mcp:admin`, and `authzen:records
// authzen:other` (cedargate's decision applications).
//
// Clients: `cg-service` (secret `cg-service-secret` unless `serviceSecret`
// says otherwise, client_credentials),
// `cg-ide` (public native, authorization code + PKCE + refresh tokens,
// redirect `http://127.0.0.1/callback` at any port, RFC 8252 §7.3),
// `cg-console` (secret `cg-console-secret`, authorization code + PKCE),
// `cg-gateway` (secret `cg-gateway-secret`, no grants: a resource server
// that introspects). Open dynamic client registration. PKCE (S256) is
// required of every client. Consent is always given: every requested scope
// and resource is granted.
//
// Users: `alice` and `bob`. Their access tokens carry `groups`,
// `department`, `email` and `name` besides RFC 9068's claims; ID tokens
// stay ordinary (`typ: JWT`).
//
// Test control endpoints (this provider only; no authentication):
// - `POST /test/rotate`: a new key goes first in the set (new tokens use
//   it); the old keys stay published.
// - `POST /test/retire`: the oldest key leaves the published set (refused
//   with 409 when it is the only key).
// - `POST /test/console-redirects` with a JSON array body: replaces
//   `cg-console`'s redirect URIs (a test learns its console's port late).
// Each answers `{"kids": [...]}` (the published key ids, signing key first)
// and persists to the keys file.
//
// State (sessions, grants, opaque tokens, registered clients) lives in
// memory: a restart keeps the keys and nothing else, so a JWT issued before
// it still verifies while an opaque token does not introspect.

import { createServer } from 'node:http';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import Provider, { errors } from 'oidc-provider';

const MCP_SCOPES = 'mcp:read mcp:tools mcp:admin';
// Scopes naming cedargate's decision applications (a token granting
// `authzen:<app>` may ask that application).
const PDP_SCOPES = 'authzen:records authzen:other';
const OIDC_SCOPES = ['openid', 'profile', 'email', 'groups', 'offline_access'];

const USERS = {
  alice: { name: 'Alice Example', email: 'alice@example.com', groups: ['sre'], department: 'finance' },
  bob: { name: 'Bob Builder', email: 'bob@example.com', groups: ['dev'], department: 'engineering' },
};

const DEFAULTS = {
  port: 0,
  keysFile: undefined,
  accessTokenTtl: 3600,
  resourcePrefixes: ['http://127.0.0.1:'],
  opaqueResourcePrefix: undefined,
  consoleRedirectUris: ['http://127.0.0.1/console/callback'],
  serviceSecret: 'cg-service-secret',
  loginPage: false,
};

function fail(message) {
  process.stderr.write(`provider.mjs: ${message}\n`);
  process.exit(2);
}

function loadConfig(infoFile, configFile) {
  if (!infoFile) fail('usage: node provider.mjs INFO_FILE [CONFIG_FILE]');
  let given = {};
  if (configFile) {
    try {
      given = JSON.parse(readFileSync(configFile, 'utf8'));
    } catch (e) {
      fail(`cannot read ${configFile}: ${e.message}`);
    }
  }
  if (given === null || typeof given !== 'object' || Array.isArray(given)) fail('the config must be a JSON object');
  const unknown = Object.keys(given).filter((k) => !(k in DEFAULTS));
  if (unknown.length) fail(`unknown config keys: ${unknown.join(', ')}`);
  const config = { ...DEFAULTS, ...given };
  config.keysFile ??= `${infoFile}.jwks.json`;
  if (!Number.isInteger(config.port) || config.port < 0 || config.port > 65535) fail('`port` must be 0..65535');
  if (!Number.isInteger(config.accessTokenTtl) || config.accessTokenTtl <= 0) fail('`accessTokenTtl` must be a positive integer');
  if (typeof config.serviceSecret !== 'string' || config.serviceSecret === '') fail('`serviceSecret` must be a non-empty string');
  for (const key of ['resourcePrefixes', 'consoleRedirectUris']) {
    if (!Array.isArray(config[key]) || !config[key].every((v) => typeof v === 'string')) fail(`\`${key}\` must be an array of strings`);
  }
  return config;
}

// --- keys ------------------------------------------------------------------

function newKey() {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const kid = `${Date.now().toString(36)}-${randomBytes(6).toString('hex')}`;
  return { ...privateKey.export({ format: 'jwk' }), kid, alg: 'ES256', use: 'sig' };
}

function saveKeys(path, keys) {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, JSON.stringify({ keys }, null, 2), { mode: 0o600 });
  renameSync(tmp, path);
}

function loadKeys(path) {
  if (existsSync(path)) {
    const { keys } = JSON.parse(readFileSync(path, 'utf8'));
    if (!Array.isArray(keys) || keys.length === 0) fail(`${path} holds no keys`);
    return keys;
  }
  const keys = [newKey()];
  saveKeys(path, keys);
  return keys;
}

// --- the provider's configuration -------------------------------------------

function resourceServer(config) {
  return async function getResourceServerInfo(ctx, indicator) {
    const base = { scope: `${MCP_SCOPES} ${PDP_SCOPES}`, accessTokenTTL: config.accessTokenTtl };
    if (config.opaqueResourcePrefix && indicator.startsWith(config.opaqueResourcePrefix)) {
      return { ...base, accessTokenFormat: 'opaque' };
    }
    if (config.resourcePrefixes.some((p) => indicator.startsWith(p))) {
      return { ...base, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
    }
    throw new errors.InvalidTarget(`resource ${indicator} is not served by this provider`);
  };
}

function clients(config) {
  return [
    {
      client_id: 'cg-service',
      client_secret: config.serviceSecret,
      grant_types: ['client_credentials'],
      response_types: [],
    },
    {
      client_id: 'cg-ide',
      application_type: 'native',
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1/callback'],
    },
    {
      client_id: 'cg-console',
      client_secret: 'cg-console-secret',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: config.consoleRedirectUris,
    },
    {
      client_id: 'cg-gateway',
      client_secret: 'cg-gateway-secret',
      grant_types: [],
      response_types: [],
    },
  ];
}

async function findAccount(ctx, id) {
  const user = USERS[id];
  if (!user) return undefined;
  return {
    accountId: id,
    async claims() {
      return { sub: id, ...user, email_verified: true };
    },
  };
}

// Claims of a user's access token (JWT payload or introspection answer).
async function extraTokenClaims(ctx, token) {
  const user = token.accountId && USERS[token.accountId];
  if (!user) return undefined;
  const { groups, department, email, name } = user;
  return { groups, department, email, name };
}

// Revocation as RFC 7009 says: a client revokes its own tokens only.
async function ownTokensOnly(ctx, client, token) {
  return token.clientId === client.clientId;
}

function providerOptions(config, keys, cookieKey) {
  const ttl = () => config.accessTokenTtl;
  return {
    clients: clients(config),
    jwks: { keys },
    findAccount,
    extraTokenClaims,
    claims: {
      openid: ['sub'],
      profile: ['name'],
      email: ['email', 'email_verified'],
      groups: ['groups', 'department'],
    },
    scopes: [...OIDC_SCOPES, ...MCP_SCOPES.split(' '), ...PDP_SCOPES.split(' ')],
    // A client that registers itself with some scopes may still ask for
    // every scope this provider knows (as many company IdPs allow): the
    // official MCP SDKs register the scopes of a resource's first
    // challenge, and a step-up asks for more.
    extraClientMetadata: {
      properties: ['cg_any_scope'],
      validator(ctx, key, value, metadata) {
        if (key === 'cg_any_scope' && metadata.scope !== undefined) {
          metadata.scope = [...OIDC_SCOPES, ...MCP_SCOPES.split(' ')].join(' ');
        }
      },
    },
    clientDefaults: {
      grant_types: ['authorization_code'],
      id_token_signed_response_alg: 'ES256',
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
    responseTypes: ['code'],
    cookies: { keys: [cookieKey] },
    pkce: { required: () => true },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    ttl: {
      AccessToken: ttl,
      ClientCredentials: ttl,
      AuthorizationCode: 60,
      IdToken: 3600,
      RefreshToken: 14 * 24 * 3600,
      Interaction: 3600,
      Session: 14 * 24 * 3600,
      Grant: 14 * 24 * 3600,
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      introspection: { enabled: true, allowedPolicy: async () => true },
      revocation: { enabled: true, allowedPolicy: ownTokensOnly },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        getResourceServerInfo: resourceServer(config),
        useGrantedResource: async () => true,
      },
    },
    renderError: async (ctx, out) => {
      ctx.type = 'json';
      ctx.body = out;
    },
  };
}

// --- interactions: sign-in and consent ---------------------------------------

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function loginForm(uid) {
  const action = `/interaction/${encodeURIComponent(uid)}/login`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in</title></head>
<body><main><h1>Sign in</h1>
<form method="post" action="${escapeHtml(action)}">
<label for="username">Username</label>
<input id="username" name="username" autocomplete="username" autofocus required>
<button type="submit">Sign in</button>
</form></main></body></html>`;
}

async function finishLogin(provider, req, res, user) {
  const result = USERS[user]
    ? { login: { accountId: user } }
    : { error: 'access_denied', error_description: `no such user: ${user}` };
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
}

async function grantConsent(provider, req, res, details) {
  const { prompt, params, session } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

async function interaction(provider, config, req, res) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'consent') {
    return grantConsent(provider, req, res, details);
  }
  const hint = details.params.login_hint;
  if (hint === undefined && config.loginPage) {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    return res.end(loginForm(details.uid));
  }
  return finishLogin(provider, req, res, hint ?? 'alice');
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

async function submittedLogin(provider, req, res) {
  await provider.interactionDetails(req, res); // 400s an unknown or expired interaction
  const username = new URLSearchParams(await readBody(req)).get('username') ?? '';
  return finishLogin(provider, req, res, username.trim());
}

// --- the server --------------------------------------------------------------

function sendJson(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

function main() {
  const [infoFile, configFile] = process.argv.slice(2);
  const config = loadConfig(infoFile, configFile);
  let keys = loadKeys(config.keysFile);
  const cookieKey = randomBytes(32).toString('hex');
  let issuer;
  let provider;
  let callback;

  // A new provider over the same in-memory state (the memory adapter's
  // store is shared by every instance): how new keys or clients take effect.
  const rebuild = () => {
    provider = new Provider(issuer, providerOptions(config, keys, cookieKey));
    provider.on('server_error', (ctx, err) => process.stderr.write(`server_error: ${err.stack}\n`));
    callback = provider.callback();
  };
  const published = () => ({ kids: keys.map((k) => k.kid) });

  const control = {
    '/test/rotate': async () => {
      keys = [newKey(), ...keys];
      return [200, published()];
    },
    '/test/retire': async () => {
      if (keys.length === 1) return [409, { error: 'the only key cannot be retired' }];
      keys = keys.slice(0, -1);
      return [200, published()];
    },
    '/test/console-redirects': async (req) => {
      let uris;
      try {
        uris = JSON.parse(await readBody(req));
      } catch {
        uris = undefined;
      }
      if (!Array.isArray(uris) || !uris.every((u) => typeof u === 'string')) {
        return [400, { error: 'the body must be a JSON array of strings' }];
      }
      config.consoleRedirectUris = uris;
      return [200, published()];
    },
  };

  const route = async (req, res) => {
    const { pathname } = new URL(req.url, issuer);
    if (req.method === 'POST' && control[pathname]) {
      const [status, body] = await control[pathname](req);
      if (status === 200) {
        saveKeys(config.keysFile, keys);
        rebuild();
      }
      return sendJson(res, status, body);
    }
    if (/^\/interaction\/[^/]+$/.test(pathname) && req.method === 'GET') {
      return interaction(provider, config, req, res);
    }
    if (/^\/interaction\/[^/]+\/login$/.test(pathname) && req.method === 'POST') {
      return submittedLogin(provider, req, res);
    }
    return callback(req, res);
  };

  const server = createServer((req, res) => {
    route(req, res).catch((err) => {
      process.stderr.write(`${req.method} ${req.url}: ${err.stack}\n`);
      if (!res.headersSent) {
        const status = err.statusCode ?? err.status ?? 500;
        sendJson(res, status, { error: err.error ?? 'server_error', error_description: err.error_description ?? err.message });
      } else {
        res.end();
      }
    });
  });
  server.listen(config.port, '127.0.0.1', () => {
    const { port } = server.address();
    issuer = `http://127.0.0.1:${port}`;
    rebuild();
    const tmp = `${infoFile}.tmp`;
    writeFileSync(tmp, JSON.stringify({ issuer, port }));
    renameSync(tmp, infoFile);
  });
  server.on('error', (err) => fail(`cannot listen on 127.0.0.1:${config.port}: ${err.message}`));
  for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
}

main();
