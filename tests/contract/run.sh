#!/usr/bin/env bash
# The contract test: serves the embedded default (a fresh SQLite store, no workers) with an
# admin token, checks that /openapi.json validates as OpenAPI 3.1, then runs schemathesis
# with every check against it (tests/contract/schemathesis.toml says what it allows and
# why). Its tools live in a virtual environment this script manages under
# ~/.cache/yardmaster. Needs the debug binary (scripts/test.sh builds it);
# CONTRACT_EXAMPLES sets the examples per operation (default 150). One worker: with two,
# CPython 3.11.7's ast.parse (which Hypothesis calls) can fail with "AST constructor
# recursion depth mismatch" when two threads parse at once, a run error that is no finding.
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
source scripts/libtorch.sh
# scripts/test.sh has built every binary once (YARDMASTER_BUILT); run alone, build it (a
# no-op when fresh: a stale binary would test yesterday's server).
[ -n "${YARDMASTER_BUILT:-}" ] || cargo build --bin yardmaster
source tests/venv.sh
tools="schemathesis==4.32.5 openapi-spec-validator==0.7.2"
ensure_venv contract-venv "$tools"

source tests/serve.sh
serve_embedded contract --no-workers
token="$admin"
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
  --max-examples "${CONTRACT_EXAMPLES:-150}" \
  --workers 1 \
  --seed "${CONTRACT_SEED:-20261125}" \
  --no-color \
  --output-truncate false
