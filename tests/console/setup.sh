#!/usr/bin/env bash
# Installs what the console's browser tests drive: `playwright-core` at the
# pinned version (package-lock.json) into tests/console/node_modules
# (gitignored), and checks Debian's `chromium` is there (`.ci/run` installs
# it with apt when missing). Idempotent and safe to run concurrently.
set -euo pipefail
cd "$(dirname "$0")"

exec 9>".setup.lock"
flock 9

if [ ! -d node_modules ] || ! cmp -s package-lock.json node_modules/.installed-lock; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi
command -v "${CHROMIUM:-chromium}" >/dev/null || {
  echo "chromium is not installed (apt-get install -y chromium)" >&2
  exit 1
}
