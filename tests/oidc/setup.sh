#!/usr/bin/env bash
# Installs the OpenID provider the OAuth tests run against: `oidc-provider`
# at the pinned version (package-lock.json) into tests/oidc/node_modules
# (gitignored). Idempotent, and safe to run concurrently (a lock serializes
# it): reinstalls only when package-lock.json changed.
set -euo pipefail
cd "$(dirname "$0")"

exec 9>".setup.lock"
flock 9

if [ ! -d node_modules ] || ! cmp -s package-lock.json node_modules/.installed-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi
