#!/usr/bin/env bash
# Profiles a no-op job's hot path: runs the embedded and the PostgreSQL + RabbitMQ (2 worker
# processes) throughput cases with a system-wide `perf record` (cpu-clock, 499 Hz, call
# graphs) over each drain's window, then keeps in bench/results/: the case's figures and the
# share of each process's samples per layer (bench/layers.py), folded stacks of the yardmaster
# processes, and their flame graph (bench/flamegraph.py). PROFILE_CASES="embedded rabbitmq"
# picks cases ("fanout" profiles the RabbitMQ fan-out drain), BENCH_JOBS the jobs, and
# PROFILE_LABEL names the files further.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
# libtorch for the inference feature (fetched once into ~/.cache/yardmaster).
source scripts/libtorch.sh
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 1; }

. bench/services.sh

bench=$(cargo bench --bench throughput --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "throughput" and message.get("executable"):
        print(message["executable"])')
mkdir -p bench/results
jobs="${BENCH_JOBS:-50000}"
for case in ${PROFILE_CASES:-embedded rabbitmq}; do
    out="bench/results/$(date -u +%Y-%m-%dT%H%M)-profile-$case${PROFILE_LABEL:+-$PROFILE_LABEL}"
    echo "commit $(git describe --always --dirty 2>/dev/null || echo unknown)" > "$out.txt"
    BENCH_ONLY="$case" BENCH_JOBS="$jobs" BENCH_PERF="$out.perf.data" "$bench" --bench | tee -a "$out.txt"
    perf script -F pid,tid,comm,ip,sym,dso -i "$out.perf.data" 2>/dev/null |
        python3 bench/layers.py "$out.folded" "$jobs" | tee -a "$out.txt"
    python3 bench/flamegraph.py "yardmaster $case: $jobs no-op jobs" < "$out.folded" > "$out.svg"
    gzip -f "$out.folded"
    rm -f "$out.perf.data" "$out.perf.data.old"
    echo "kept in $out.*"
done
