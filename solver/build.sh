#!/usr/bin/env bash
# Builds target/solver/cvc5: a cvc5 1.3.1 front end (solver/cvc5-driver.c)
# linked against the shared libraries of the pinned PyPI wheel `cvc5==1.3.1`.
# Run from the repository root: `bash solver/build.sh`. Idempotent: a second
# run only re-checks the wheel's hash and the binary (a second or so).
set -euo pipefail

CVC5_VERSION=1.3.1
WHEEL=cvc5-1.3.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
WHEEL_SHA256=ec29191d5efd04000dc6fa696e993e50601743e5ad3b16b82fb8670a40bd026d

ROOT=$(pwd)
SRC=$ROOT/solver/cvc5-driver.c
OUT=$ROOT/target/solver
BIN=$OUT/cvc5
LIB=$OUT/lib
PYTHON=${PYTHON:-python3}
CC=${CC:-gcc}

if [[ ! -f $SRC ]]; then
  echo "solver/build.sh: run it from the repository root (no $SRC)" >&2
  exit 1
fi
mkdir -p "$OUT"

sha_ok() { [[ -f $1 ]] && echo "$WHEEL_SHA256  $1" | sha256sum --check --status; }

# 1. The wheel, pinned by version, platform and hash.
if ! sha_ok "$OUT/$WHEEL"; then
  rm -f "$OUT/$WHEEL"
  echo "solver: downloading cvc5==$CVC5_VERSION (wheel for CPython 3.11, manylinux x86_64)" >&2
  "$PYTHON" -m pip download "cvc5==$CVC5_VERSION" --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_17_x86_64 --dest "$OUT" --quiet
  if ! sha_ok "$OUT/$WHEEL"; then
    echo "solver/build.sh: $WHEEL is missing or its sha256 is not $WHEEL_SHA256" >&2
    exit 1
  fi
  rm -rf "$LIB"
fi

# 2. The shared libraries (cvc5.libs/*) and the license texts, out of the wheel.
STAMP=$LIB/.from-$WHEEL_SHA256
if [[ ! -f $STAMP ]]; then
  rm -rf "$LIB" "$OUT/licenses"
  mkdir -p "$LIB" "$OUT/licenses"
  "$PYTHON" - "$OUT/$WHEEL" "$LIB" "$OUT/licenses" <<'PY'
import os, sys, zipfile
wheel, lib, lic = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.endswith("/"):
            continue
        if name.startswith("cvc5.libs/"):
            dest = os.path.join(lib, os.path.basename(name))
        elif ".dist-info/licenses/" in name:
            dest = os.path.join(lic, name.split(".dist-info/licenses/", 1)[1])
        else:
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(name) as src, open(dest, "wb") as out:
            out.write(src.read())
PY
  touch "$STAMP"
fi

one() {
  local m=("$LIB"/$1)
  if [[ ${#m[@]} -ne 1 || ! -f ${m[0]} ]]; then
    echo "solver/build.sh: expected exactly one $1 in $LIB" >&2
    exit 1
  fi
  echo "${m[0]}"
}
LIBCVC5=$(one 'libcvc5-*.so.1')
LIBPARSER=$(one 'libcvc5parser-*.so.1')

# 3. The driver, with an rpath to the libraries beside it.
if [[ ! -x $BIN || $SRC -nt $BIN || $STAMP -nt $BIN || $0 -nt $BIN ]]; then
  echo "solver: compiling $BIN" >&2
  "$CC" -std=c11 -O2 -Wall -Wextra -o "$BIN.tmp" "$SRC" \
    "$LIBPARSER" "$LIBCVC5" -Wl,-rpath,'$ORIGIN/lib'
  mv "$BIN.tmp" "$BIN"
fi

# 4. Self-check: a satisfiable query gives `sat` and a model.
got=$(echo '(set-logic ALL)(set-option :produce-models true)(declare-const x Int)(assert (> x 1))(check-sat)(get-model)' \
  | "$BIN" --lang smt --tlimit=10000)
want_re=$'^sat\n\\(\n\\(define-fun x \\(\\) Int [0-9]+\\)\n\\)$'
if [[ ! $got =~ $want_re ]]; then
  echo "solver/build.sh: self-check failed; got:" >&2
  echo "$got" >&2
  exit 1
fi
echo "$BIN"
