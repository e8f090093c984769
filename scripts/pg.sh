#!/usr/bin/env bash
# A throwaway PostgreSQL for tests and benchmarks: Debian's `postgresql` package, a cluster in a
# directory of your choice, loopback only, trust auth, a free port. No system service, no Docker.
#
#   scripts/pg.sh start DIR [--watch PID] [--durable]
#                                           init DIR when new, start, print the database URL
#   scripts/pg.sh stop DIR                  stop (the data stays; `start DIR` again reuses port)
#   scripts/pg.sh remove DIR                stop and delete DIR
#   scripts/pg.sh url DIR                   print the URL of DIR's cluster
#
# --watch PID: stop the server and delete DIR once process PID has exited (test harnesses that
# cannot run clean-up code on exit pass their own pid).
# --durable: fsync, full-page writes and synchronous commits on, as an operator runs PostgreSQL
# (benchmarks). Without it they are off: a commit costs the CPU only, which tests want.
#
# initdb and postgres refuse to run as root; as root this runs them as the `postgres` user.
set -euo pipefail

die() { echo "pg.sh: $*" >&2; exit 1; }

bindir() {
  local d
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir; return
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  die "PostgreSQL is not installed (Debian: apt-get install -y postgresql)"
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
    return
  fi
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  die "no free port found"
}

url_of() { echo "postgres://postgres@127.0.0.1:$(cat "$1/port")/postgres"; }

start() {
  local dir=$1 watch=${2:-} durable=${3:-}
  local bin; bin=$(bindir)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "no 'postgres' user (is the postgresql package installed?)"
    chown postgres "$dir"
    runuser -u postgres -- test -x "$dir" ||
      die "the postgres user cannot reach $dir (make its parent directories world-searchable, e.g. chmod 755)"
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --no-sync \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    free_port >"$dir/port"
  fi
  local port; port=$(cat "$dir/port")
  # Sockets in DIR, TCP on loopback only; unless durable, fsync off: the cluster is disposable.
  local sync="-c fsync=off -c full_page_writes=off -c synchronous_commit=off"
  [ -n "$durable" ] && sync="-c fsync=on -c full_page_writes=on -c synchronous_commit=on"
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-h 127.0.0.1 -p $port -k $dir $sync -c max_connections=200" \
    start >/dev/null || { tail -20 "$dir/server.log" >&2; die "postgres did not start"; }
  if [ -n "$watch" ]; then
    # The watch removes only the cluster it was started with: once the watched process is
    # gone, DIR may have been removed and started again by another run (a suite run right
    # after another with the same output directory), whose watch has its own token.
    local token="$watch.$$.$RANDOM"
    echo "$token" >"$dir/watched-by"
    ( trap '' HUP
      while kill -0 "$watch" 2>/dev/null; do sleep 1; done
      [ "$(cat "$dir/watched-by" 2>/dev/null)" = "$token" ] || exit 0
      as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
      rm -rf "$dir" ) </dev/null >/dev/null 2>&1 &
  fi
  url_of "$dir"
}

stop() {
  local dir=$1
  [ -d "$dir/data" ] || return 0
  as_owner "$(bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: pg.sh start|stop|remove|url DIR [--watch PID]"
case $cmd in
  start)
    watch="" durable=""
    shift 2
    while [ $# -gt 0 ]; do
      case $1 in
        --watch) watch=${2:?--watch needs a pid}; shift 2 ;;
        --durable) durable=1; shift ;;
        *) die "unknown option $1" ;;
      esac
    done
    start "$dir" "$watch" "$durable" ;;
  stop) stop "$dir" ;;
  remove) stop "$dir"; rm -rf "$dir" ;;
  url) url_of "$dir" ;;
  *) die "unknown command $cmd" ;;
esac
