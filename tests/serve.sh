# Sourced by tests that drive a live server (tests/contract, tests/browser): serves the
# embedded default from the debug binary on a fresh SQLite store in a scratch directory,
# with an admin token, and stops it (SIGTERM) and removes the directory on exit.
#
#   serve_embedded NAME [serve flags...]   (environment: YARDMASTER__* as usual)
#
# sets: bin, work (the scratch directory), store (its URL), admin (the token), base (the
# server's URL), server (its pid); its log is $work/server.log.

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yardmaster/target}"
bin="$CARGO_TARGET_DIR/debug/yardmaster"
work="$(mktemp -d)"
server=""
_serve_cleanup() {
  if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap _serve_cleanup EXIT

serve_embedded() {
  local name=$1; shift
  local port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  store="sqlite://$work/$name.db?mode=rwc"
  admin="$("$bin" token new)"
  YARDMASTER__STORE__URL="$store" \
  YARDMASTER__AUTH__BOOTSTRAP_TOKEN="$admin" \
  YARDMASTER__UPLOADS__DIR="$work/uploads" \
  RUST_LOG="${RUST_LOG:-warn}" \
    "$bin" serve --bind "127.0.0.1:$port" "$@" >"$work/server.log" 2>&1 &
  server=$!
  base="http://127.0.0.1:$port"
  for _ in $(seq 300); do
    if curl -sf "$base/readyz" >/dev/null; then return 0; fi
    if ! kill -0 "$server" 2>/dev/null; then cat "$work/server.log" >&2; echo "$name: the server died" >&2; exit 1; fi
    sleep 0.2
  done
  echo "$name: the server did not become ready" >&2
  exit 1
}
