#!/usr/bin/env bash
# Runs the benchmark: starts the local PostgreSQL and RabbitMQ if they are down, installs the
# peer (graphile-worker, from npm) beside it, builds in release and prints the figures with
# ratios. BENCH_JOBS=N sets the jobs per case (default 5000), BENCH_HISTORY the finished jobs
# of the history cases (default 1000000, 0 skips them), BENCH_ONLY=a,b the case groups
# (throughput, fanout, http, latency, history, memory; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"

pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
rabbitmqctl -q status >/dev/null 2>&1 || rabbitmq-server -detached
rabbitmqctl -q await_startup --timeout 120
# The bench's queues live in a virtual host of their own, emptied on every run.
rabbitmqctl -q delete_vhost yardmaster_bench >/dev/null 2>&1 || true
rabbitmqctl -q add_vhost yardmaster_bench
rabbitmqctl -q set_permissions -p yardmaster_bench guest ".*" ".*" ".*"
(cd bench/graphile && npm install --no-audit --no-fund --silent)
cargo bench --bench throughput
