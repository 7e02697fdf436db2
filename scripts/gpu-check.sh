#!/usr/bin/env bash
# The check for a GPU host: builds yardmaster against the CUDA libtorch
# (YARDMASTER_LIBTORCH=cuda scripts/libtorch.sh), then on the GPU runs
# `yardmaster inference check` (device cuda, then cuda in half precision), the inference
# tests (YARDMASTER_TEST_INFERENCE_DEVICE=cuda) and the inference benchmark
# (BENCH_INFERENCE_DEVICE=cuda), and says plainly that it ran on a GPU and which. Everything
# it prints is kept in bench/results/DATE-gpu-check.txt.
#
# Without an NVIDIA GPU (no /dev/nvidia0, or libtorch sees no CUDA device) it says so and
# exits 2, having run nothing on the CPU in its name; any other failure exits 1. The tests are on PostgreSQL and
# RabbitMQ too: export YARDMASTER_TEST_POSTGRES_URL and YARDMASTER_TEST_AMQP_URL as for
# scripts/test.sh.
#
#   bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

no_gpu() {
    echo "gpu-check: $1" >&2
    echo "gpu-check: no GPU here, so nothing ran; this is the check for a GPU host" >&2
    exit 2
}

if [ ! -e /dev/nvidia0 ]; then
    no_gpu "no NVIDIA GPU on this host (/dev/nvidia0 does not exist)"
fi

results="bench/results"
mkdir -p "$results"
log="$results/$(date -u +%Y-%m-%dT%H%M%S)-gpu-check.txt"
scratch="$(mktemp -d)"
exec > >(tee "$log") 2>&1
tee_pid=$!
# On any exit: the scratch model gone, and every line in the kept log before the script ends.
trap 'rm -rf "$scratch"; exec 1>&- 2>&-; wait "$tee_pid"' EXIT

echo "== gpu-check on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
fi

export YARDMASTER_LIBTORCH=cuda
source scripts/libtorch.sh
# A target directory of its own: the CUDA build does not replace the CPU one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}-cuda"
cargo build --release --bin yardmaster
bin="$CARGO_TARGET_DIR/release/yardmaster"

model="$scratch/default.pt"
export YARDMASTER__INFERENCE__MODEL="$model"
"$bin" model init

echo "== inference check, device cuda"
if ! YARDMASTER__INFERENCE__DEVICE=cuda "$bin" inference check | tee "$scratch/check.txt"; then
    if grep -q "no CUDA device is visible" "$scratch/check.txt"; then
        no_gpu "libtorch sees no CUDA device (the driver, or the device nodes: see the check above)"
    fi
    echo "gpu-check: inference check failed (above)" >&2
    exit 1
fi
echo "== inference check, device cuda, half precision"
YARDMASTER__INFERENCE__DEVICE=cuda YARDMASTER__INFERENCE__HALF=true "$bin" inference check

echo "== inference tests on the GPU"
YARDMASTER_TEST_INFERENCE_DEVICE=cuda cargo nextest run --release --test api -E 'test(/inference/)'

echo "== inference benchmark on the GPU"
BENCH_INFERENCE_DEVICE=cuda BENCH_ONLY=inference bash scripts/bench.sh

gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"
echo "gpu-check: ran on a GPU (${gpu:-cuda:0}): the checks, the inference tests and the benchmark passed; output kept in $log"
