# Sourced by test scripts that need Python tools (tests/contract, tests/python): keeps one
# virtual environment per name under ~/.cache/yardmaster, holding exactly the pinned tools.
#
#   ensure_venv NAME "tool==1.2 other==3.4"    sets: venv (its directory)

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
