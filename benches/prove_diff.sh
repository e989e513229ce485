#!/usr/bin/env bash
# How long `policy diff --prove` takes to prove the shipped policy set
# against a one-policy change (a new permit on `write_node`), per action
# (every principal type of it) and in total, and how long `policy lint
# --prove` takes on the shipped set. Prints the median of RUNS runs.
#
#   benches/prove_diff.sh [path/to/cedargate] [runs]
#
# Defaults: target/debug/cedargate, 5 runs. Needs python3 and the solver
# (`bash solver/build.sh`, which this runs).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/target/debug/cedargate}
RUNS=${2:-5}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
(cd "$ROOT" && bash solver/build.sh >/dev/null)

mkdir "$DIR/candidate"
cp "$ROOT"/policies/*.cedar "$DIR/candidate/"
cat >"$DIR/candidate/deployers.cedar" <<'EOF'
@id("deployers-write-any-graph")
permit (
  principal in Gateway::Role::"deployers",
  action == Gateway::Action::"write_node",
  resource
);
EOF
cat >"$DIR/cedargate.toml" <<EOF
policies_dir = "$ROOT/policies"
schema_file = "$ROOT/schemas/gateway.cedarschema"

[prove]
solver = "$ROOT/target/solver/cvc5"
EOF
export CEDARGATE_CONFIG="$DIR/cedargate.toml"

for i in $(seq "$RUNS"); do
    start=$(date +%s%N)
    "$BIN" policy diff --prove --json "$DIR/candidate" >"$DIR/diff-$i.json" 2>/dev/null || [ $? -eq 1 ]
    echo $(( ($(date +%s%N) - start) / 1000000 )) >"$DIR/diff-$i.wall"
    start=$(date +%s%N)
    "$BIN" policy lint --prove --json >"$DIR/lint-$i.json"
    echo $(( ($(date +%s%N) - start) / 1000000 )) >"$DIR/lint-$i.wall"
done

python3 - "$DIR" "$RUNS" <<'PY'
import collections, json, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
diffs = [json.load(open(f"{d}/diff-{i}.json")) for i in range(1, runs + 1)]
lints = [json.load(open(f"{d}/lint-{i}.json")) for i in range(1, runs + 1)]
wall = lambda kind: statistics.median(int(open(f"{d}/{kind}-{i}.wall").read()) for i in range(1, runs + 1))
per = collections.defaultdict(list)
verdicts = {}
for r in diffs:
    sums = collections.defaultdict(int)
    for e in r["proof"]["envs"]:
        sums[e["env"]["action"]] += e["millis"]
        verdicts.setdefault(e["env"]["action"], set()).add(e["verdict"])
    for action, ms in sums.items():
        per[action].append(ms)
envs = collections.Counter(e["env"]["action"] for e in diffs[0]["proof"]["envs"])
print(f"{'action':<20} {'envs':>4} {'median ms':>9}  verdicts")
for action in sorted(per):
    print(f"{action:<20} {envs[action]:>4} {statistics.median(per[action]):>9.0f}  {', '.join(sorted(verdicts[action]))}")
proof = statistics.median(r["proof"]["millis"] for r in diffs)
print(f"proof (all {sum(envs.values())} environments): median {proof:.0f} ms; whole command (loading both sets too): median {wall('diff'):.0f} ms")
lint = statistics.median(r["lint"]["millis"] for r in lints)
print(f"lint --prove of the shipped set: proof median {lint:.0f} ms; whole command median {wall('lint'):.0f} ms; findings {len(lints[0]['lint']['findings'])}")
PY
