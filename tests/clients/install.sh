#!/usr/bin/env bash
# Installs the real MCP clients the end-to-end tests drive, at the pinned
# versions, into this directory (node_modules/ and .venv/ are gitignored).
# Idempotent: reinstalls only when package-lock.json or requirements.txt
# changed since the last install.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -d node_modules ] || ! cmp -s package-lock.json node_modules/.installed-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi

if [ ! -x .venv/bin/python ] || ! cmp -s requirements.txt .venv/.installed-requirements; then
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  cp requirements.txt .venv/.installed-requirements
fi
