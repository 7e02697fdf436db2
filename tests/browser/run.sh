#!/usr/bin/env bash
# The dashboard end to end in headless Chromium: installs Debian's chromium if missing and
# playwright-core from npm (tests/browser/package-lock.json; it downloads no browser),
# serves the embedded default (a fresh SQLite store, workers on) with an admin token and a
# read-only member token, and runs dashboard.test.mjs against it. Screenshots of the main
# pages are written to tests/browser/screenshots/. Needs the debug binary (scripts/test.sh
# builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
source scripts/libtorch.sh
# scripts/test.sh has built every binary once (YARDMASTER_BUILT); run alone, build them.
[ -n "${YARDMASTER_BUILT:-}" ] || cargo build --bin yardmaster

if ! command -v chromium >/dev/null 2>&1; then
  echo "browser: installing Debian's chromium" >&2
  apt-get install -y chromium >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y chromium >/dev/null; }
fi
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --silent)
fi

source tests/serve.sh
# At info, so a failure's log says whether the server was stopped (a signal and its drain).
RUST_LOG="${RUST_LOG:-info}" YARDMASTER__WORKER__GRACE_SECONDS=2 serve_embedded browser
reader="$(YARDMASTER__STORE__URL="$store" "$bin" token create --user reader --room default --read-only)"

status=0
BASE="$base" ADMIN_TOKEN="$admin" READER_TOKEN="$reader" SCREENSHOTS="$PWD/tests/browser/screenshots" \
  node --test --test-reporter=spec tests/browser/dashboard.test.mjs || status=$?
if [ "$status" -ne 0 ]; then
  if ! kill -0 "$server" 2>/dev/null; then
    wait "$server" && code=0 || code=$?
    echo "browser: the server is gone (exit status $code)" >&2
  fi
  echo "browser: the server's log:" >&2
  tail -n 80 "$work/server.log" >&2
fi
exit "$status"
