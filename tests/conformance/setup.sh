#!/usr/bin/env bash
# Installs the official MCP conformance suite (@modelcontextprotocol/conformance)
# and the Node it needs (>= 22, from the `node` npm package, so the machine's
# own Node may be older) at the pinned versions (package-lock.json) into
# tests/conformance/node_modules (gitignored). Idempotent, and safe to run
# concurrently (a lock serializes it): reinstalls only when package-lock.json
# changed.
set -euo pipefail
cd "$(dirname "$0")"

exec 9>".setup.lock"
flock 9

if [ ! -d node_modules ] || ! cmp -s package-lock.json node_modules/.installed-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi
node_modules/node/bin/node --version >/dev/null
