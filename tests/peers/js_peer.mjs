// An A2A peer built with the reference JavaScript SDK (`@a2a-js/sdk`).
//
// One JSON-RPC endpoint (`/rpc`) serving A2A 1.0 (`SendMessage` with
// `A2A-Version: 1.0`) and A2A 0.3 (`message/send`) through the SDK's
// legacy compatibility layer; the card at `/.well-known/agent-card.json`.
//
// Skills (chosen by `metadata.skillId` of the request or the message):
// - `translate`: answers a Message with one data part;
// - `shout`: answers a Message with one text part (upper-cased `text`);
// - `plan`: answers a Task whose artifact holds two data parts;
// - anything else: a failed Task.
//
// Usage: node js_peer.mjs PORT_FILE. Listens on 127.0.0.1:0, writes the
// port to PORT_FILE once listening, and appends each request's method and
// A2A-Version header to PORT_FILE + ".log" (one JSON object a line).

import { appendFileSync, renameSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import express from 'express';
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryTaskStore,
} from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const portFile = process.argv[2];
const logPath = `${portFile}.log`;

const ROLE_AGENT = 2;
const TASK_STATE_COMPLETED = 3;
const TASK_STATE_FAILED = 4;

const dataPart = (value) => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: '' });
const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: '' });

function argsOf(message) {
  for (const p of message?.parts ?? []) {
    if (p.content?.$case === 'data' && p.content.value && typeof p.content.value === 'object') {
      return p.content.value;
    }
  }
  return {};
}

const executor = {
  async execute(ctx, bus) {
    const message = ctx.userMessage;
    const skill = String(ctx.request?.metadata?.skillId ?? message?.metadata?.skillId ?? '');
    const args = argsOf(message);
    const reply = (parts) => ({
      messageId: randomUUID(),
      contextId: ctx.contextId,
      taskId: '',
      role: ROLE_AGENT,
      parts,
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    });
    if (skill === 'translate') {
      bus.publish(AgentEvent.message(reply([dataPart({ text: args.text ?? '', lang: args.lang ?? 'fr', translated: `[${args.lang ?? 'fr'}] ${args.text ?? ''}` })])));
    } else if (skill === 'shout') {
      bus.publish(AgentEvent.message(reply([textPart(String(args.text ?? '').toUpperCase())])));
    } else {
      const completed = skill === 'plan';
      bus.publish(AgentEvent.task({
        id: ctx.taskId,
        contextId: ctx.contextId,
        status: {
          state: completed ? TASK_STATE_COMPLETED : TASK_STATE_FAILED,
          message: completed ? undefined : reply([textPart(`no such skill \`${skill}\``)]),
          timestamp: new Date().toISOString(),
        },
        artifacts: completed
          ? [{ artifactId: randomUUID(), name: 'plan', description: '', parts: [dataPart({ step: 1 }), dataPart({ step: 2 })], metadata: undefined, extensions: [] }]
          : [],
        history: [message],
        metadata: undefined,
      }));
    }
    bus.finished();
  },
  async cancelTask() {},
};

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  const base = `http://127.0.0.1:${port}`;
  const card = {
    name: 'Lingo (js)',
    description: 'Translates and plans.',
    supportedInterfaces: [
      { url: `${base}/rpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
      { url: `${base}/rpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '0.3' },
    ],
    provider: undefined,
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['application/json'],
    defaultOutputModes: ['application/json', 'text/plain'],
    skills: [
      {
        id: 'translate', name: 'Translate', description: 'Translates text.', tags: ['text'], examples: [],
        inputModes: [], outputModes: [], securityRequirements: [],
        inputSchema: { type: 'object', properties: { text: { type: 'string' }, lang: { type: 'string' } }, required: ['text'] },
      },
      { id: 'shout', name: 'Shout', description: 'Upper-cases text.', tags: ['text'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] },
      { id: 'plan', name: 'Plan', description: 'A two-step plan.', tags: ['plan'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] },
    ],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.use(express.json({ limit: '1mb' }));
  app.use('/rpc', (req, _res, next) => {
    appendFileSync(logPath, JSON.stringify({
      method: req.body?.method ?? null,
      version: req.get('a2a-version') ?? null,
      authorization: req.get('authorization') ?? null,
      body: req.body ?? null,
    }) + '\n');
    next();
  });
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler, legacyCompat: { enabled: true } }));
  app.use('/rpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }));
  writeFileSync(`${portFile}.tmp`, String(port));
  renameSync(`${portFile}.tmp`, portFile);
});
