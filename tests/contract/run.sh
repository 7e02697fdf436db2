#!/usr/bin/env bash
# The contract test: serves the embedded default (a fresh SQLite store, no workers) with an
# admin token, checks that /openapi.json validates as OpenAPI 3.1, then runs schemathesis
# with every check against it (tests/contract/schemathesis.toml says what it allows and
# why). Its tools live in a virtual environment this script manages under
# ~/.cache/yardmaster. Needs the debug binary (scripts/test.sh builds it);
# CONTRACT_EXAMPLES sets the examples per operation (default 300). One worker: with two,
# CPython 3.11.7's ast.parse (which Hypothesis calls) can fail with "AST constructor
# recursion depth mismatch" when two threads parse at once, a run error that is no finding.
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
bin="$CARGO_TARGET_DIR/debug/yardmaster"
# Always (a no-op when fresh): a stale binary would test yesterday's server.
source scripts/libtorch.sh
cargo build --bin yardmaster
venv="${YARDMASTER_CACHE:-$HOME/.cache/yardmaster}/contract-venv"
tools="schemathesis==4.32.5 openapi-spec-validator==0.7.2"
if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$tools" ]; then
  echo "contract: installing $tools into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet $tools
  echo "$tools" >"$venv/.installed"
fi

work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="$("$bin" token new)"
YARDMASTER__STORE__URL="sqlite://$work/contract.db?mode=rwc" \
YARDMASTER__AUTH__BOOTSTRAP_TOKEN="$token" \
RUST_LOG=warn \
  "$bin" serve --no-workers --bind "127.0.0.1:$port" >"$work/server.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
for _ in $(seq 300); do
  if curl -sf "$base/readyz" >/dev/null; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then cat "$work/server.log" >&2; echo "contract: the server died" >&2; exit 1; fi
  sleep 0.2
done
curl -sf "$base/openapi.json" >"$work/openapi.json"
"$venv/bin/python" -c '
import json, sys
from openapi_spec_validator import validate
from openapi_spec_validator.validation import OpenAPIV31SpecValidator
spec = json.load(open(sys.argv[1]))
validate(spec, cls=OpenAPIV31SpecValidator)
print("contract: /openapi.json is valid OpenAPI", spec["openapi"], "with", len(spec["paths"]), "paths")
' "$work/openapi.json"
cd tests/contract
"$venv/bin/schemathesis" run "$base/openapi.json" \
  --checks all \
  --header "Authorization: Bearer $token" \
  --max-examples "${CONTRACT_EXAMPLES:-300}" \
  --workers 1 \
  --seed "${CONTRACT_SEED:-20261125}" \
  --no-color \
  --output-truncate false
