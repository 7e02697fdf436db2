#!/usr/bin/env bash
# The chaos run (see chaos.py): builds the binaries it starts, then runs it. The short
# profile (about two minutes) runs in scripts/test.sh; `CHAOS_PROFILE=long` (ten minutes of
# faults, ten thousand jobs) by hand. `CHAOS_SEED=N` repeats a run's fault schedule.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
# libtorch for the inference feature (fetched once into ~/.cache/yardmaster).
source scripts/libtorch.sh
# scripts/test.sh has built every binary once (YARDMASTER_BUILT); run alone, build them.
[ -n "${YARDMASTER_BUILT:-}" ] || cargo build --bins --examples
args=(--bin-dir "$CARGO_TARGET_DIR/debug" --profile "${CHAOS_PROFILE:-short}")
if [ -n "${CHAOS_SEED:-}" ]; then args+=(--seed "$CHAOS_SEED"); fi
exec python3 tests/chaos/chaos.py "${args[@]}"
