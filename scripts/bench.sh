#!/usr/bin/env bash
# Runs the benchmark: starts the local PostgreSQL and RabbitMQ if they are down, installs the
# peer (graphile-worker, from npm) beside it, builds in release and prints the figures with
# ratios, keeping the whole output in bench/results/ (one file per run). BENCH_JOBS=N sets
# the jobs per throughput case (default 50000), BENCH_LATENCY_JOBS those of each latency
# case (default 5000), BENCH_HISTORY the finished jobs of the history cases (default
# 1000000, 0 skips them), BENCH_ONLY=a,b the case groups (throughput, groupcommit, fanout,
# http, latency, history, prune, memory, inference, remote, sdk, waiters, uploads, dashboard, lateness,
# scheduler, far, neighbours;
# default all but groupcommit and neighbours); BENCH_LABEL names the
# results file further.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
# libtorch for the inference feature (fetched once into ~/.cache/yardmaster).
source scripts/libtorch.sh

. bench/services.sh
# The neighbours cases measure pgvector's index too, on the server scripts/pgvector.sh starts.
if [[ ",${BENCH_ONLY:-}," == *,neighbours,* ]]; then
  bash scripts/pgvector.sh
  export BENCH_PGVECTOR_URL="${BENCH_PGVECTOR_URL:-postgres://postgres@127.0.0.1:5439/postgres}"
fi
(cd bench/graphile && npm install --no-audit --no-fund --silent)
# The Python SDK (and its tools) for the sdk cases' worker process.
source tests/venv.sh
ensure_sdk_venv
cargo bench --bench throughput --no-run
mkdir -p bench/results
result="bench/results/$(date -u +%Y-%m-%dT%H%M%S)-${BENCH_ONLY:-all}${BENCH_LABEL:+-$BENCH_LABEL}.txt"
echo "commit $(git describe --always --dirty 2>/dev/null || echo unknown): $(git log -1 --format=%s 2>/dev/null)" > "$result"
cargo bench --bench throughput 2>&1 | sed -u "s#$HOME#~#g; s#$PWD#.#g" | tee -a "$result"
echo "kept in $result"
