#!/usr/bin/env bash
# What one request of 64 `tools/list` adds to the decision trail: records,
# their stored bytes (the sum of every column of the new rows) and the
# growth of the SQLite database, for a session that lists 7 tools (memory
# and graph tools). Prints one line per run.
#
#   benches/trail_growth.sh [path/to/cedargate] [requests]
#
# Defaults: target/debug/cedargate, 1 request. Needs curl, python3, sqlite3.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/target/debug/cedargate}
REQUESTS=${2:-1}
PORT=${PORT:-18087}
DIR=$(mktemp -d)
PID=
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$DIR"
}
trap cleanup EXIT

cat >"$DIR/cedargate.toml" <<EOF
listen = "127.0.0.1:$PORT"
data_dir = "$DIR/data"
policies_dir = "$ROOT/policies"
schema_file = "$ROOT/schemas/gateway.cedarschema"
demo_tenant = false
EOF
export CEDARGATE_CONFIG="$DIR/cedargate.toml"
json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
"$BIN" org create --id acme --name Acme >/dev/null
"$BIN" project create --org acme --id web --graph-enabled true >/dev/null
"$BIN" agent create --org acme --id claude --name Claude --role developers >/dev/null
KEY=$("$BIN" key create --org acme --label bench | json key)
URL=$("$BIN" session create --org acme --project web --agent claude | json mcpUrl)

"$BIN" serve >"$DIR/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
    sleep 0.1
done

BODY=$(python3 -c 'import json; print(json.dumps([{"jsonrpc":"2.0","id":i,"method":"tools/list"} for i in range(64)]))')
TOOLS=$(curl -sf "$URL" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["result"]["tools"]))')

DB="$DIR/data/cedargate.db"
COLUMNS="length(id)+length(time)+ifnull(length(org_id),0)+ifnull(length(session_id),0)+length(principal)+length(action)+length(resource)+length(context)+length(entities_hash)+length(policy_hash)+length(decision)+length(reasons)+length(errors)+length(outcome)+length(notes)+length(prev_hash)+length(hash)"
measure() {
    # Stop-free reading: the WAL is part of the database.
    sqlite3 "$DB" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    sqlite3 "$DB" "SELECT COUNT(*), IFNULL(SUM($COLUMNS),0), (SELECT page_count FROM pragma_page_count())*(SELECT page_size FROM pragma_page_size()) FROM decisions;"
}
# Everything queued so far is committed before the first reading.
curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null || true
IFS='|' read -r R0 B0 F0 <<<"$(measure)"
for _ in $(seq 1 "$REQUESTS"); do
    curl -sf "$URL" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d "$BODY" >/dev/null
done
curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null || true
IFS='|' read -r R1 B1 F1 <<<"$(measure)"
echo "tools per list: $TOOLS; per request of 64 tools/list: records $(((R1 - R0) / REQUESTS)), row bytes $(((B1 - B0) / REQUESTS)), database growth $(((F1 - F0) / REQUESTS)) bytes"
