#!/usr/bin/env bash
# The Python SDK's checks: installs clients/python (as a user would, not in place) with its
# tools into a virtual environment this script manages under ~/.cache/yardmaster, runs ruff
# (lint and format) and mypy --strict over the package and these tests, then pytest against
# live servers this suite starts itself (tests/python/conftest.py): once on the embedded
# default, once on PostgreSQL + RabbitMQ (YM_PY_BACKEND=postgres). Needs the debug binary,
# which it builds (a no-op when fresh).
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
source scripts/libtorch.sh
# scripts/test.sh has built every binary once (YARDMASTER_BUILT); run alone, build them.
[ -n "${YARDMASTER_BUILT:-}" ] || cargo build --bin yardmaster
source tests/venv.sh
ensure_sdk_venv

config=(--config clients/python/pyproject.toml)
python=(clients/python tests/python examples/remote_worker.py bench/sdk_worker.py)
"$venv/bin/ruff" check "${config[@]}" "${python[@]}"
"$venv/bin/ruff" format --check "${config[@]}" "${python[@]}"
MYPYPATH=tests/python "$venv/bin/mypy" --config-file clients/python/pyproject.toml clients/python/yardmaster tests/python \
  examples/remote_worker.py bench/sdk_worker.py

# The tests import the installed package, not the source tree.
cd tests/python
"$venv/bin/python" -m pytest -q -p no:cacheprovider
YM_PY_BACKEND=postgres "$venv/bin/python" -m pytest -q -p no:cacheprovider
