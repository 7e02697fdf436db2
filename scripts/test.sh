#!/usr/bin/env bash
# Sets up and runs the whole test suite: starts the local PostgreSQL if it is down, installs
# cargo-nextest if missing, builds once, runs every test (unit and integration, both backends).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
export YARDMASTER_TEST_POSTGRES_URL="${YARDMASTER_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"

wait_for() { # NAME SECONDS COMMAND...
  local name=$1 seconds=$2; shift 2
  for _ in $(seq "$((seconds * 5))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "test.sh: $name did not come up within ${seconds}s" >&2
  return 1
}

ensure_postgres() {
  if pg_isready -q -h 127.0.0.1 -p 5432; then return 0; fi
  echo "test.sh: PostgreSQL is down; starting it" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
  wait_for PostgreSQL 60 pg_isready -q -h 127.0.0.1 -p 5432
}

ensure_nextest() {
  if cargo nextest --version >/dev/null 2>&1; then return 0; fi
  cargo install cargo-nextest --locked
}

ensure_postgres
ensure_nextest
cargo nextest run --workspace --no-fail-fast "$@"
