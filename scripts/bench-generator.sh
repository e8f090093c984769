#!/usr/bin/env bash
# Is `pms bench` fast and light enough to measure others? Against `pms echo` on loopback, 500-byte
# ARRAY payload POSTs, interleaved rounds of:
#   HTTP/1.1: wrk -t2 -cN  vs  pms bench run --users N
#   HTTP/2:   h2load -cN -m1 -t2  vs  pms bench run --http 2 --users N
# for N = 100 and 10000, printing req/s and each generator's peak RSS, and the pms/other ratio of
# each round. Everything on 127.0.0.1; every run bounded in time. Tools come from Debian's packages
# when missing and running as root.
#
#   scripts/bench-generator.sh [--duration SECONDS] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=8
ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "usage: $0 [--duration S] [--rounds N]" >&2; exit 64 ;;
  esac
done

. scripts/lib.sh
ensure_tools wrk:wrk h2load:nghttp2-client /usr/bin/time:time

PROFILE=${PMS_PROFILE:-release}
cargo build --profile "$PROFILE" --quiet --bin pms
PMS="target/$PROFILE/pms"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d)
PORT=9461
"$PMS" echo --listen "127.0.0.1:$PORT" >/dev/null 2>&1 &
ECHO=$!
trap 'kill $ECHO 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
URL="http://127.0.0.1:$PORT/passthrough"

# The same payload pms bench generates, for wrk and h2load.
python3 - "$WORK/payload.json" <<'PY'
import sys
A = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
n = 500
out = bytearray(('{"size":"%dB","payload":[' % n).encode()); k = 0
def nxt(c):
    global k
    for _ in range(c):
        out.append(A[k % len(A)]); k += 1
out += b'"'; nxt(min(n - len(out) - 4, 10)); out += b'"'
while True:
    rem = n - len(out) - 2
    if rem >= 13: out += b',"'; nxt(10); out += b'"'
    elif rem >= 4: out += b',"'; nxt(rem - 3); out += b'"'
    else: out.pop(); nxt(rem); out += b'"'; break
out += b']}'
assert len(out) == n
open(sys.argv[1], "wb").write(out)
PY
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
local f = io.open("$WORK/payload.json", "rb")
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA

rss() { awk '/maxrss/ {print $2}' "$1"; }
pms_run() { # users http -> "rate rss"
  /usr/bin/time -f "maxrss %M" -o "$WORK/t" "$PMS" bench run "$URL" --users "$1" --http "$2" \
    --duration "${DURATION}s" --method POST --payload-size 500 -H "content-type: application/json" \
    --progress never 2>/dev/null | awk '/^measured/ {print $4}' | tr -d '\n'
  echo " $(rss "$WORK/t")"
}
printf '%-6s %-8s %6s %12s %10s %12s %10s %7s %7s\n' round proto users other_rps other_KB pms_rps pms_KB rate× rss×
for r in $(seq "$ROUNDS"); do
  for users in 100 10000; do
    /usr/bin/time -f "maxrss %M" -o "$WORK/t" wrk -t2 -c"$users" -d"${DURATION}s" -s "$WORK/post.lua" "$URL" >"$WORK/wrk" 2>&1
    o=$(awk '/Requests\/sec/ {print $2}' "$WORK/wrk"); orss=$(rss "$WORK/t")
    read -r p prss <<<"$(pms_run "$users" 1.1)"
    awk -v r="$r" -v u="$users" -v o="$o" -v orss="$orss" -v p="$p" -v prss="$prss" \
      'BEGIN {printf "%-6s %-8s %6s %12.0f %10s %12.0f %10s %7.2f %7.2f\n", r, "h1/wrk", u, o, orss, p, prss, p/o, prss/orss}'
    /usr/bin/time -f "maxrss %M" -o "$WORK/t" h2load -c"$users" -m1 -t2 -D "$DURATION" -d "$WORK/payload.json" \
      -H "content-type: application/json" "$URL" >"$WORK/h2" 2>&1
    o=$(awk '/^finished in/ {print $4}' "$WORK/h2"); orss=$(rss "$WORK/t")
    read -r p prss <<<"$(pms_run "$users" 2)"
    awk -v r="$r" -v u="$users" -v o="$o" -v orss="$orss" -v p="$p" -v prss="$prss" \
      'BEGIN {printf "%-6s %-8s %6s %12.0f %10s %12.0f %10s %7.2f %7.2f\n", r, "h2/h2load", u, o, orss, p, prss, p/o, prss/orss}'
  done
done
