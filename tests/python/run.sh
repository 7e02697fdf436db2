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
cargo build --bin yardmaster
source tests/venv.sh
tools="httpx==0.28.1 pydantic==2.14.4 pytest==9.2.0 ruff==0.17.6 mypy==2.4.1 openapi-python-client==0.29.1"
ensure_venv python-venv "$tools"
# The package as it is now, built and installed the way `pip install ./clients/python` does.
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
cp -r clients/python "$build/python"
"$venv/bin/pip" install --quiet --no-deps --force-reinstall "$build/python"

config=(--config clients/python/pyproject.toml)
python=(clients/python tests/python examples/remote_worker.py)
"$venv/bin/ruff" check "${config[@]}" "${python[@]}"
"$venv/bin/ruff" format --check "${config[@]}" "${python[@]}"
MYPYPATH=tests/python "$venv/bin/mypy" --config-file clients/python/pyproject.toml clients/python/yardmaster tests/python \
  examples/remote_worker.py

# The tests import the installed package, not the source tree.
cd tests/python
"$venv/bin/python" -m pytest -q -p no:cacheprovider
YM_PY_BACKEND=postgres "$venv/bin/python" -m pytest -q -p no:cacheprovider
