#!/usr/bin/env bash
# Regenerates crates/pms/symbol-order.txt, the list of functions that optimized builds of `pms`
# lay out first (crates/pms/build.rs explains why). It runs the release gateway under valgrind's
# callgrind, in front of `pms echo`, through what scripts/bench-proxies.sh measures at low
# concurrency: start-up, HTTP/1.1 in clear and over TLS, HTTP/2 over TLS, h2c, the admin
# endpoints, graceful shutdown; once on epoll and once on io_uring (runtime.io). Every function of
# `pms` that ran is listed, hottest first.
#
# The names carry Rust's symbol hashes, which stay put across source edits and checkout paths
# but change with dependency versions, features and the compiler. Regenerate after such an
# update, or when a change moves the gateway's hot code; `--check` tells how many listed names a
# binary has and whether they ended up together. Everything listens on 127.0.0.1; the loads take
# about 40 s. valgrind, wrk, h2load and curl come from Debian's packages when missing.
#
#   scripts/symbol-order.sh                    # build, profile, rewrite crates/pms/symbol-order.txt
#   scripts/symbol-order.sh --check [BINARY]   # default BINARY: target/release/pms
set -euo pipefail
cd "$(dirname "$0")/.."

ORDER=crates/pms/symbol-order.txt

if [ "${1:-}" = "--check" ]; then
  bin=${2:-target/release/pms}
  [ -x "$bin" ] || { echo "no binary at $bin (cargo build --release --bin pms)" >&2; exit 1; }
  # Of the listed names, how many BIN has, and how far apart its linker put them: about their own
  # size when the layout was applied, most of the binary's code when it was not.
  nm -S --defined-only "$bin" | python3 -c '
import sys
order, binary = sys.argv[1], sys.argv[2]
want = {l.strip() for l in open(order) if l.strip() and not l.startswith("#")}
spans = {}
for line in sys.stdin:
    f = line.split()
    if len(f) == 4 and f[3] in want:
        start = int(f[0], 16)
        spans[f[3]] = (start, start + int(f[1], 16))
msg = "%d of %d functions in %s are in %s" % (len(spans), len(want), order, binary)
if spans:
    size = sum(z - a for a, z in spans.values())
    reach = max(z for _, z in spans.values()) - min(a for a, _ in spans.values())
    msg += ": %.1f MB of code spread over %.1f MB" % (size / 1e6, reach / 1e6)
print(msg)' "$ORDER" "$bin"
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: $0 [--check [BINARY]]" >&2; exit 64; }

. scripts/lib.sh
ensure_tools valgrind:valgrind wrk:wrk h2load:nghttp2-client curl:curl

cargo build --release --locked --quiet --bin pms
PMS=$(pwd -P)/target/release/pms

ECHO_PORT=18688
require_free_ports $ECHO_PORT 19301 19302 19901

make_workdir

"$PMS" certs dev --out "$WORK/certs" >/dev/null
printf '{"payload":"%0486d"}' 0 > "$WORK/body.json" # 500 bytes
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$WORK/body.json", "rb"); wrk.body = f:read("*a"); f:close()
LUA
proxy_gateway_config "$WORK/gateway.toml" $ECHO_PORT "$WORK/certs/server.pem" "$WORK/certs/server-key.pem"

"$PMS" echo --listen 127.0.0.1:$ECHO_PORT 2>/dev/null & PIDS+=($!)

# profile CONFIG OUT: the gateway on CONFIG under callgrind, through the loads, into OUT.
profile() {
  valgrind --tool=callgrind --demangle=no --compress-strings=no \
    --callgrind-out-file="$2" --log-file="$WORK/valgrind.log" \
    "$PMS" gateway --config "$1" 2>/dev/null &
  GATEWAY=$!
  PIDS+=($GATEWAY)

  local ready=0
  for _ in $(seq 600); do
    if curl -sf -o /dev/null http://127.0.0.1:19901/readyz; then ready=1; break; fi
    kill -0 "$GATEWAY" 2>/dev/null || break
    sleep 0.1
  done
  [ "$ready" = 1 ] || { echo "the gateway under valgrind ($1) did not get ready; see $WORK/valgrind.log" >&2; cat "$WORK/valgrind.log" >&2; return 1; }

  echo "profiling the gateway, $(basename "$1") (about 20 s)..." >&2
  curl -sf -o /dev/null http://127.0.0.1:19301/passthrough
  wrk -t1 -c10 -d4s -s "$WORK/post.lua" http://127.0.0.1:19301/passthrough >/dev/null
  wrk -t1 -c10 -d4s -s "$WORK/post.lua" https://127.0.0.1:19302/passthrough >/dev/null
  h2load -c10 -m1 -D4 -d "$WORK/body.json" -H 'content-type: application/json' \
    https://127.0.0.1:19302/passthrough >/dev/null
  h2load -c10 -m1 -D4 -d "$WORK/body.json" -H 'content-type: application/json' \
    http://127.0.0.1:19301/passthrough >/dev/null
  curl -sf -o /dev/null http://127.0.0.1:19901/metrics
  curl -sf -o /dev/null http://127.0.0.1:19901/healthz

  kill -TERM "$GATEWAY"
  wait "$GATEWAY" || { echo "the gateway did not exit cleanly; see $WORK/valgrind.log" >&2; return 1; }
}

# Both socket drivers (runtime.io): the functions either one runs hot are laid out together.
{ printf '[runtime]\nio = "epoll"\n'; cat "$WORK/gateway.toml"; } > "$WORK/gateway-epoll.toml"
{ printf '[runtime]\nio = "io_uring"\n'; cat "$WORK/gateway.toml"; } > "$WORK/gateway-uring.toml"
profile "$WORK/gateway-epoll.toml" "$WORK/callgrind.out" || exit 1
profiles=("$WORK/callgrind.out")
if profile "$WORK/gateway-uring.toml" "$WORK/callgrind-uring.out"; then
  profiles+=("$WORK/callgrind-uring.out")
else
  echo "io_uring not profiled: its functions keep the default layout" >&2
fi

# Self cost per function of the `pms` object: after `fn=NAME`, each cost line is "LINE IR"; the
# line after `calls=` is a callee's inclusive cost and not the caller's own.
listed=$(awk -v bin="$PMS" '
  /^ob=/ { ob = substr($0, 4); next }
  /^fn=/ { fn = substr($0, 4); sub(/\047[0-9]+$/, "", fn); mine = (ob == bin); next }
  /^calls=/ { skip = 1; next }
  /^[0-9+*-]/ { if (skip) { skip = 0; next } if (mine) cost[fn] += $2; next }
  END { for (f in cost) print cost[f], f }' "${profiles[@]}" |
  awk '$2 ~ /^[A-Za-z_][A-Za-z0-9_.$]*$/' | sort -k1,1nr -k2 | awk '{print $2}')

count=$(echo "$listed" | grep -c . || true)
if [ "$count" -lt 100 ]; then
  echo "only $count functions of $PMS in callgrind's output; $ORDER left as it was" >&2
  exit 1
fi
{
  echo "# Functions of \`pms\` that optimized builds lay out first, hottest first (crates/pms/build.rs)."
  echo "# Generated by scripts/symbol-order.sh at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(rustc -V | awk '{print $1, $2}')."
  echo "$listed"
} > "$ORDER"
echo "$count functions written to $ORDER" >&2
