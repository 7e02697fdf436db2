# Sourced by test scripts that need Python tools (tests/contract, tests/python): keeps one
# virtual environment per name under ~/.cache/yardmaster, holding exactly the pinned tools.
#
#   ensure_venv NAME "tool==1.2 other==3.4"    sets: venv (its directory)
#   ensure_sdk_venv                             the SDK's venv (python-venv: its tools and the
#                                               package as it is now, installed as a user would)

ensure_venv() {
  local name=$1 tools=$2
  venv="${YARDMASTER_CACHE:-$HOME/.cache/yardmaster}/$name"
  if [ ! -f "$venv/.installed" ] || [ "$(cat "$venv/.installed")" != "$tools" ]; then
    echo "$name: installing $tools into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet $tools
    echo "$tools" >"$venv/.installed"
  fi
}

# The SDK's tests and benchmark share one environment, with these tools pinned.
SDK_TOOLS="httpx==0.28.1 pydantic==2.14.4 pytest==9.2.0 ruff==0.17.6 mypy==2.4.1 openapi-python-client==0.29.1"

ensure_sdk_venv() {
  ensure_venv python-venv "$SDK_TOOLS"
  # The package as it is now, built and installed the way `pip install ./clients/python` does
  # (from a copy, so the build leaves nothing in the tree).
  local build
  build="$(mktemp -d)"
  cp -r clients/python "$build/python"
  "$venv/bin/pip" install --quiet --no-deps --force-reinstall "$build/python"
  rm -rf "$build"
}
