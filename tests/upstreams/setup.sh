#!/usr/bin/env bash
# Installs the real upstream MCP servers the upstream tests front, at the
# pinned versions (package-lock.json, requirements.txt), into
# tests/upstreams/node_modules and tests/upstreams/.venv
# (gitignored). Idempotent, and safe to run concurrently (a lock
# serializes it): reinstalls only when a pin file changed.
set -euo pipefail
cd "$(dirname "$0")"

exec 9>".setup.lock"
flock 9

if [ ! -d node_modules ] || ! cmp -s package-lock.json node_modules/.installed-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi

# The upstream built with the official Python SDK (py_server.py).
if [ ! -x .venv/bin/python ] || ! cmp -s requirements.txt .venv/.installed-requirements; then
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  cp requirements.txt .venv/.installed-requirements
fi
