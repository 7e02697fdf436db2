#!/usr/bin/env bash
# Checks the sandboxing of the systemd units in deploy/: runs
# `systemd-analyze security --offline=true` on each one, prints its overall exposure, and
# exits 1 if any is above 4.9 (worse than "OK"), or if systemd-analyze is not installed.
# A template (name@.service) is checked as its instance name@default.service.
#
#   bash scripts/check-units.sh                      # the units in deploy/
#   bash scripts/check-units.sh path/to/x.service …  # the unit files given instead
set -euo pipefail

MAX_EXPOSURE=4.9

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "check-units: systemd-analyze not found; install systemd to check the units" >&2
    exit 1
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "$#" -gt 0 ]; then
    units=("$@")
else
    units=(
        "$root/deploy/yardmaster-api.service"
        "$root/deploy/yardmaster-worker.service"
        "$root/deploy/yardmaster-worker@.service"
        "$root/deploy/yardmaster-gpu-worker.service"
        "$root/deploy/yardmaster-reaper.service"
    )
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

failed=0
index=0
for unit in "${units[@]}"; do
    if [ ! -f "$unit" ]; then
        echo "check-units: $unit: no such file" >&2
        exit 1
    fi
    # Each unit is analysed from a copy in a directory of its own, a template under an
    # instance name (systemd-analyze names the unit after the file).
    name="$(basename "$unit")"
    case "$name" in
        *@.service) name="${name%@.service}@default.service" ;;
    esac
    index=$((index + 1))
    mkdir "$tmp/$index"
    cp "$unit" "$tmp/$index/$name"
    if ! output="$(systemd-analyze security --offline=true --no-pager "$tmp/$index/$name" 2>&1)"; then
        echo "$output" >&2
        echo "check-units: systemd-analyze security failed on $name" >&2
        exit 1
    fi
    # The last line reads "→ Overall exposure level for NAME: 1.1 OK 🙂".
    line="$(grep 'Overall exposure level for' <<<"$output" || true)"
    score="$(sed -nE 's/.*Overall exposure level for [^:]*: ([0-9]+(\.[0-9]+)?) ([A-Z]+).*/\1/p' <<<"$line")"
    rating="$(sed -nE 's/.*Overall exposure level for [^:]*: ([0-9]+(\.[0-9]+)?) ([A-Z]+).*/\3/p' <<<"$line")"
    if [ -z "$score" ]; then
        echo "$output" >&2
        echo "check-units: no overall exposure in the output for $name" >&2
        exit 1
    fi
    if awk -v s="$score" -v max="$MAX_EXPOSURE" 'BEGIN { exit !(s > max) }'; then
        echo "FAIL $name: exposure $score $rating (above $MAX_EXPOSURE)" >&2
        failed=1
    else
        echo "ok   $name: exposure $score $rating"
    fi
done

if [ "$failed" -ne 0 ]; then
    echo "check-units: sandboxing too weak; see systemd-analyze security --offline=true UNIT" >&2
    exit 1
fi
