#!/usr/bin/env bash
# Installs the reference A2A SDKs the peer tests run (idempotent, cached):
# the Python `a2a-sdk` into tests/peers/.venv and `@a2a-js/sdk` into
# tests/peers/node_modules. Safe to run concurrently (a lock serializes it).
set -euo pipefail
cd "$(dirname "$0")"

exec 9>".setup.lock"
flock 9

python="${PYTHON:-python3}"
stamp_py=".venv/.installed-$(sha256sum requirements.txt | cut -c1-16)"
if [ ! -f "$stamp_py" ]; then
    rm -rf .venv
    "$python" -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
    touch "$stamp_py"
fi

stamp_js="node_modules/.installed-$(sha256sum package.json | cut -c1-16)"
if [ ! -f "$stamp_js" ]; then
    npm install --no-audit --no-fund --no-package-lock --loglevel=error
    touch "$stamp_js"
fi
