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
# the throughput table and of the CPU table, then per build and mix the median rate and CPU
# per job, and each later mix against the first one of its round: median, mean and standard
# deviation of the ratios (a round's ratio moves by a tenth here; the mean's standard error is
# that over the square root of the rounds).
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
done | tee "${TMPDIR:-/tmp}/ab.$$"
python3 - "${TMPDIR:-/tmp}/ab.$$" <<'SUMMARY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    found = re.match(r"round (\d+) (\S+) (levels=\S+ limit=\S+): .*?(\d+) /s.*?\|[^|]*?\s([\d.]+)\s+[\d.]+\s", line)
    if found:
        rnd, build, mix, rate, cpu = found.groups()
        runs[(int(rnd), build, mix)] = (float(rate), float(cpu))
builds = list(dict.fromkeys(build for _, build, _ in runs))
mixes = list(dict.fromkeys(mix for _, _, mix in runs))
for build in builds:
    for mix in mixes:
        got = [value for (_, b, m), value in runs.items() if (b, m) == (build, mix)]
        line = f"{build} {mix}: {len(got)} runs, median {statistics.median(r for r, _ in got):,.0f}/s at {statistics.median(c for _, c in got):.1f} us"
        if mix != mixes[0]:
            ratios = [runs[(r, b, m)][0] / runs[(r, b, mixes[0])][0] for (r, b, m) in runs if (b, m) == (build, mix) and (r, b, mixes[0]) in runs]
            if len(ratios) > 1:
                line += f"; against {mixes[0]}: median {statistics.median(ratios):.3f}, mean {statistics.mean(ratios):.3f}, sd {statistics.stdev(ratios):.3f}"
        print(line)
SUMMARY
rm -f "${TMPDIR:-/tmp}/ab.$$"
