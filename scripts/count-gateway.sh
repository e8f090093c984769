#!/usr/bin/env bash
# How many instructions the gateway spends in user space on a fixed number of requests, counted
# by callgrind: a figure that does not move with what else the machine is doing, for setting one
# build against another on a shared host where throughput and CPU time drift by ±15 % between
# runs. Two builds counted with the same arguments compare directly; the kernel's share (the
# socket copies, TCP) is not in it, and callgrind counts a `rep movsb` copy byte by byte, so a
# copy weighs more here than in cycles.
#
# One `pms echo` (this checkout's release build) on 127.0.0.1:19050 and the gateway (BIN, under
# valgrind) on the proxy benchmark's ports (19301 cleartext, 19302 TLS); h2load sends N POSTs of
# SIZE bytes over 100 connections: HTTP/1.1 cleartext (h1c) or HTTP/2 over TLS (h2). Prints the
# load's outcome, the total and the functions above 1 %.
#
#   scripts/count-gateway.sh BIN h1c|h2 [N] [SIZE]      # N 20000, SIZE 10240
#   e.g. scripts/count-gateway.sh /tmp/pms-old h1c && scripts/count-gateway.sh target/release/pms h1c
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BIN h1c|h2 [N] [SIZE]" >&2; exit 64; }
BIN=$(realpath "$1") MODE=$2 N=${3:-20000} SIZE=${4:-10240}
case "$MODE" in h1c | h2) ;; *) echo "mode is h1c or h2" >&2; exit 64 ;; esac
. scripts/lib.sh
ensure_tools valgrind:valgrind h2load:nghttp2-client
require_free_ports 19050 19301 19302 19901
cargo build --release --quiet --bin pms
make_workdir
target/release/pms certs dev --out "$WORK/certs" >/dev/null
head -c "$SIZE" /dev/zero | tr '\0' 'x' > "$WORK/body"
proxy_gateway_config "$WORK/gateway.toml" 19050 "$WORK/certs/server.pem" "$WORK/certs/server-key.pem"

target/release/pms echo --listen 127.0.0.1:19050 2>/dev/null & PIDS+=($!)
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out" \
  "$BIN" gateway --config "$WORK/gateway.toml" 2>"$WORK/valgrind.log" &
GATEWAY=$!
for port in 19050 19301; do
  for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
if [ "$MODE" = h1c ]; then
  url=http://127.0.0.1:19301/ proto=(--h1)
else
  url=https://127.0.0.1:19302/ proto=(-m 1)
fi
h2load "${proto[@]}" -n "$N" -c 100 -d "$WORK/body" -H 'content-type: application/octet-stream' "$url" \
  | grep -E '^(requests|status codes):'
# callgrind writes its counts when the gateway exits (SIGTERM drains it).
kill -TERM "$GATEWAY"
wait "$GATEWAY" || true
echo "$(basename "$BIN") $MODE, $N requests of $SIZE bytes:"
callgrind_annotate --auto=no --threshold=90 "$WORK/callgrind.out" 2>/dev/null \
  | awk '/PROGRAM TOTALS/ { print; next }
         /%\)/ { p = $0; sub(/^[^(]*\( */, "", p); sub(/%.*/, "", p); if (p + 0 >= 1) print }' \
  | sed -E 's#/root/.cargo/registry/src/[^/]*/##; s#/rustc/[0-9a-f]+/##' | cut -c1-160
