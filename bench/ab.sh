#!/usr/bin/env bash
# Alternates bench binaries, and drain mixes, round by round, so two builds are compared on
# the same minutes (drains here move 10-15% from one minute to the next). Build each version
# first (`cargo bench --bench throughput --no-run`) and copy its two binaries aside with
# `bash bench/ab.sh keep DIR`: the bench and the yardmaster its worker processes run (they
# would run the last one built, whichever bench starts them).
#
#   BINS="before=/tmp/ab/before after=/tmp/ab/after" bash bench/ab.sh
#
# BINS: name=directory pairs. CASE: `embedded` (default) or `rabbitmq` (PostgreSQL + RabbitMQ, 2
# workers). MIXES: comma-separated "levels limit" pairs, as BENCH_FLOW_PRIORITIES and
# BENCH_FLOW_LIMIT take them (default "none 0,spread 1": plain, then levels 0-9 interleaved
# under a limit that never binds). ROUNDS (3), BENCH_JOBS (40000). Prints each run's line of
# the throughput table and of the CPU table.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}/release"
if [ "${1:-}" = keep ]; then
    mkdir -p "${2:?keep DIR}"
    bench=$(ls -t "$target"/deps/throughput-* | grep -v '\.d$' | head -n 1)
    cp "$bench" "$2/throughput" && cp "$target/yardmaster" "$2/yardmaster"
    echo "kept $bench and $target/yardmaster in $2"
    exit 0
fi
source scripts/libtorch.sh >/dev/null
. bench/services.sh >/dev/null
case="${CASE:-embedded}"
IFS=, read -ra mixes <<< "${MIXES:-none 0,spread 1}"
for round in $(seq 1 "${ROUNDS:-3}"); do
    for bin in ${BINS:?name=directory pairs}; do
        for mix in "${mixes[@]}"; do
            read -r levels limit <<< "$mix"
            lines=$(BENCH_ONLY="$case" BENCH_JOBS="${BENCH_JOBS:-40000}" BENCH_FLOWING=1 \
                BENCH_FLOW_PRIORITIES="$levels" BENCH_FLOW_LIMIT="$limit" BENCH_YARDMASTER="${bin#*=}/yardmaster" "${bin#*=}/throughput" --bench 2>&1 |
                grep -E '^(yardmaster( embedded|: PostgreSQL \+ RabbitMQ, 2 worker)|submission of)' | sed 's/  */ /g' | tr '\n' '|')
            echo "round $round ${bin%%=*} levels=$levels limit=$limit: $lines"
        done
    done
done
