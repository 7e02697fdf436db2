#!/usr/bin/env bash
# Sets up and runs yardmaster on the embedded default (SQLite file ./yardmaster.db, in-process
# queues, no servers), inference included: fetches libtorch once (scripts/libtorch.sh),
# builds in release, writes the default model once (yardmaster model init), then serves the
# API with its workers on 127.0.0.1:8080. Arguments go to `yardmaster serve`
# (e.g. --bind 0.0.0.0:8080). Without libtorch: cargo run --release --no-default-features -- serve.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch.sh
cargo build --release --bin yardmaster
bin="${CARGO_TARGET_DIR:-target}/release/yardmaster"
"$bin" model init
exec "$bin" serve "$@"
