#!/usr/bin/env bash
# Sets up and runs the whole test suite: starts the local PostgreSQL and RabbitMQ if they are
# down, and the PostgreSQL server with pgvector of the pgvector tests (scripts/pgvector.sh), gives the tests an empty RabbitMQ virtual host, installs cargo-nextest and faketime if
# missing, sets up libtorch once (scripts/libtorch.sh: the inference feature is tested too), checks the systemd units' sandboxing, builds once and runs every test (unit and
# integration, every backend), fuzzes every parser of outside input for a few seconds
# each (scripts/fuzz.sh), then the short chaos run (tests/chaos: private servers, faults at
# random, nothing lost). After the tests, the dashboard in headless Chromium (Debian's
# chromium and playwright-core from npm, installed when missing; tests/browser) and the
# contract test: schemathesis (installed into a virtual environment under
# ~/.cache/yardmaster) against a live server (tests/contract), and the Python SDK's lint,
# types and tests against live servers on both deployments (tests/python). A failed stage does not stop
# the rest: the end prints one line per stage (outcome, wall time) and exits 1 if any failed.
# First of all, `cargo fmt --check` and `cargo clippy --all-targets -- -D warnings`: a broken
# build stops the run there, in a minute or two, not after the suite.
#
# `scripts/test.sh --quick` is the loop for development: the same first step, then the unit
# tests and every integration test on SQLite with the in-process transport (no PostgreSQL,
# no RabbitMQ, no browser, contract, fuzzing or chaos). Arguments after it go to nextest.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
# libtorch for the inference feature (fetched once into ~/.cache/yardmaster).
source scripts/libtorch.sh
export YARDMASTER_TEST_POSTGRES_URL="${YARDMASTER_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
TEST_VHOST=yardmaster_test
export YARDMASTER_TEST_AMQP_URL="${YARDMASTER_TEST_AMQP_URL:-amqp://127.0.0.1:5672/$TEST_VHOST}"
export YARDMASTER_TEST_PGVECTOR_URL="${YARDMASTER_TEST_PGVECTOR_URL:-postgres://postgres@127.0.0.1:5439/postgres}"

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

ensure_rabbitmq() {
  if ! rabbitmqctl -q status >/dev/null 2>&1; then
    echo "test.sh: RabbitMQ is down; starting it" >&2
    rabbitmq-server -detached
  fi
  rabbitmqctl -q await_startup --timeout 120
  # A broker restart test may have left the application stopped.
  rabbitmqctl -q start_app >/dev/null 2>&1 || true
  # The broker's defaults, should a test that shortens the consumer timeout have been killed.
  rabbitmqctl -q eval 'application:set_env(rabbit, consumer_timeout, 1800000), application:set_env(rabbit, channel_tick_interval, 60000).' >/dev/null
  # Queues of earlier runs go with the old virtual host.
  rabbitmqctl -q delete_vhost "$TEST_VHOST" >/dev/null 2>&1 || true
  rabbitmqctl -q add_vhost "$TEST_VHOST"
  rabbitmqctl -q set_permissions -p "$TEST_VHOST" guest ".*" ".*" ".*"
}

ensure_faketime() { # the clock-skew tests run a worker minutes ahead with libfaketime
  if command -v faketime >/dev/null 2>&1; then return 0; fi
  echo "test.sh: installing faketime" >&2
  apt-get install -y faketime >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y faketime >/dev/null; }
}

ensure_nextest() {
  if cargo nextest --version >/dev/null 2>&1; then return 0; fi
  cargo install cargo-nextest --locked
}

quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi

lint() {
  # `&&`: inside `if ! lint`, `set -e` does not stop a function at a failed command.
  cargo fmt --all -- --check && cargo clippy --all-targets -- -D warnings
}
echo "test.sh: lint (cargo fmt --check, cargo clippy -D warnings)" >&2
lint_started=$SECONDS
if ! lint; then
  echo "test.sh: lint failed after $((SECONDS - lint_started)) s; nothing else ran" >&2
  exit 1
fi
lint_seconds=$((SECONDS - lint_started))

ensure_nextest
if [ "$quick" -eq 1 ]; then
  # Integration tests of PostgreSQL and RabbitMQ are named for them; the rest run on SQLite.
  cargo nextest run --workspace --no-fail-fast -E 'not test(/postgres/) and not test(/amqp/) and not test(/pgvector/)' "$@"
  exit $?
fi
ensure_postgres
bash scripts/pgvector.sh
ensure_rabbitmq
ensure_faketime
# Every stage runs whatever an earlier one did; the summary names each with its outcome and
# wall time, and the script fails if any stage failed.
stages=("$(printf '%-9s %-18s %5d s' lint passed "$lint_seconds")")
failed=0
stage() { # NAME COMMAND...
  local name=$1 started=$SECONDS status=0; shift
  echo "test.sh: stage $name" >&2
  "$@" || status=$?
  local outcome=passed
  if [ "$status" -ne 0 ]; then outcome="FAILED (exit $status)"; failed=1; fi
  stages+=("$(printf '%-9s %-18s %5d s' "$name" "$outcome" "$((SECONDS - started))")")
}

stage units bash scripts/check-units.sh
# One build serves every stage: the test binaries, and the server and example binaries the
# browser, contract, Python and chaos stages start (YARDMASTER_BUILT: they build nothing).
# With OpenTelemetry export (the `otel` feature, off unless `log.otlp_endpoint` is set), so
# its test runs with the rest instead of after a second build; clippy checks the default.
build_started=$SECONDS
if ! cargo nextest run --workspace --features yardmaster/otel --no-run; then
  echo "test.sh: the build failed after $((SECONDS - build_started)) s; no test ran" >&2
  exit 1
fi
stages+=("$(printf '%-9s %-18s %5d s' build passed "$((SECONDS - build_started))")")
export YARDMASTER_BUILT=1
stage nextest cargo nextest run --workspace --features yardmaster/otel --no-fail-fast "$@"
# A crash of the pgvector server reaches its tests only as dropped connections: its log says why.
grep -h -A1 "terminated by signal" /var/tmp/yardmaster-pgvector-*/data/server.log 2>/dev/null |
  sed 's/^/test.sh: pgvector server: /' | tail -n 20 >&2 || true
# The dashboard end to end in headless Chromium (tests/browser; screenshots in
# tests/browser/screenshots/).
stage browser bash tests/browser/run.sh
# The API against its published contract: schemathesis, every check (tests/contract).
stage contract bash tests/contract/run.sh
# The Python client and worker SDK (clients/python): ruff, mypy --strict, and pytest against
# live servers on both deployments (tests/python).
stage python bash tests/python/run.sh
stage fuzzing env FUZZ_SECONDS="${FUZZ_SECONDS:-15}" bash scripts/fuzz.sh
stage chaos bash tests/chaos/run.sh

echo
echo "test.sh: summary"
for line in "${stages[@]}"; do echo "  $line"; done
if [ "$failed" -ne 0 ]; then
  echo "test.sh: a stage failed" >&2
  exit 1
fi
echo "test.sh: every stage passed"
