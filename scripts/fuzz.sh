#!/usr/bin/env bash
# Fuzzes every parser of outside input (fuzz/fuzz_targets: submissions, broker messages,
# query strings) for FUZZ_SECONDS each (default 20), with libFuzzer. Installs cargo-fuzz if
# missing. A crash leaves its input under fuzz/artifacts/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-20}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# cargo-fuzz passes the sanitizer's unstable flags; the machine's stable toolchain accepts
# them this way (no other toolchain can be installed here).
export RUSTC_BOOTSTRAP=1
target_dir="${FUZZ_TARGET_DIR:-$HOME/.cache/yardmaster/fuzz-target}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in submission broker_message query_string; do
  mkdir -p "fuzz/corpus/$target"
  if ! cargo fuzz run --target-dir "$target_dir" "$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target found a crash (the input is under fuzz/artifacts/$target)" >&2
    exit 1
  fi
  runs="$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -n 1)"
  echo "fuzz: $target: ${runs:-?} inputs in ${seconds}s, no crash"
done
