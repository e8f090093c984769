#!/usr/bin/env bash
# How many instructions a proxy spends in user space on a fixed number of requests, counted by
# callgrind: a figure that does not move with what else the machine is doing, for setting one
# build against another, or the gateway against nginx or HAProxy on the same exchange, on a
# shared host where throughput and CPU time drift by ±15 % between runs. Two runs with the same
# mode, N and SIZE compare directly. The kernel's share (the socket copies, TCP) is not in it,
# and callgrind counts a `rep movsb` copy byte by byte, so a copy weighs more here than in
# cycles; a peer's cryptography (OpenSSL) is counted as the gateway's (rustls, ring) is.
#
# `pms echo` (this checkout's release build, or PMS_ECHO) is the back-end: HTTP/1.1 on
# 127.0.0.1:19050, HTTP/2 over TLS on 19051. The proxy runs under valgrind on the proxy
# benchmark's ports (19301 cleartext, 19302 TLS offering h2 and http/1.1): the gateway BIN, or
# nginx or HAProxy as the suite's peers are set up (one process or thread here: callgrind runs
# one at a time anyway). h2load sends N POSTs of SIZE bytes over 100 connections (CONNECTIONS
# sets another number: the cache misses of many connections' buffers show at 1,000):
#   h1c    HTTP/1.1 cleartext, to the back-end over HTTP/1.1 cleartext
#   h2     HTTP/2 over TLS, to the back-end over HTTP/1.1 cleartext
#   h2h2   HTTP/2 over TLS, to the back-end over HTTP/2 over TLS (not nginx: no HTTP/2 upstreams)
# Prints the load's outcome, the total and the functions above 1 %. CALLGRIND_ARGS adds options
# to callgrind (`--cache-sim=yes`: first-level and last-level cache misses beside the counts).
#
#   scripts/count-gateway.sh BIN|nginx|haproxy h1c|h2|h2h2 [N] [SIZE]   # N 20000, SIZE 10240
#   e.g. scripts/count-gateway.sh /tmp/pms-old h1c && scripts/count-gateway.sh target/release/pms h1c
#        scripts/count-gateway.sh haproxy h2h2 && scripts/count-gateway.sh target/release/pms h2h2
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BIN|nginx|haproxy h1c|h2|h2h2 [N] [SIZE]" >&2; exit 64; }
WHO=$1 MODE=$2 N=${3:-20000} SIZE=${4:-10240}
case "$MODE" in h1c | h2 | h2h2) ;; *) echo "mode is h1c, h2 or h2h2" >&2; exit 64 ;; esac
if [ "$WHO" = nginx ] && [ "$MODE" = h2h2 ]; then
  echo "nginx has no HTTP/2 upstreams: h2h2 is for the gateway and haproxy" >&2; exit 64
fi
. scripts/lib.sh
tools=(valgrind:valgrind h2load:nghttp2-client)
case "$WHO" in
  nginx) tools+=(nginx:nginx-light) ;;
  haproxy) tools+=(haproxy:haproxy) ;;
  *) BIN=$(realpath "$WHO") ;;
esac
ensure_tools "${tools[@]}"
require_free_ports 19050 19051 19301 19302 19901
if [ -z "${PMS_ECHO:-}" ]; then
  cargo build --release --quiet --bin pms
  PMS_ECHO=target/release/pms
fi
make_workdir
"$PMS_ECHO" certs dev --out "$WORK/certs" >/dev/null
CERT=$WORK/certs/server.pem KEY=$WORK/certs/server-key.pem CA=$WORK/certs/ca.pem
head -c "$SIZE" /dev/zero | tr '\0' 'x' > "$WORK/body"

if [ "$MODE" = h2h2 ]; then
  BACKEND=19051
  "$PMS_ECHO" echo --listen 127.0.0.1:$BACKEND --tls-cert "$CERT" --tls-key "$KEY" 2>/dev/null & PIDS+=($!)
else
  BACKEND=19050
  "$PMS_ECHO" echo --listen 127.0.0.1:$BACKEND 2>/dev/null & PIDS+=($!)
fi

# The proxy under test, as `proxy=(command...)`.
case "$WHO" in
  nginx)
    # One process, no master: callgrind follows no forks.
    nginx_proxy_config "$WORK" $BACKEND 19301 19302 "$CERT" "$KEY" 1024 "master_process off;"
    proxy=(nginx -c "$WORK/nginx.conf" -g 'daemon off;')
    ;;
  haproxy)
    cat "$CERT" "$KEY" > "$WORK/haproxy.pem"
    server_tls=""
    [ "$MODE" = h2h2 ] && server_tls=" ssl verify required ca-file $CA verifyhost localhost alpn h2"
    cat > "$WORK/haproxy.cfg" <<HAP
global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 10s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:19301
  bind 127.0.0.1:19302 ssl crt $WORK/haproxy.pem alpn h2,http/1.1
  default_backend be
backend be
  server echo 127.0.0.1:$BACKEND$server_tls
HAP
    proxy=(haproxy -f "$WORK/haproxy.cfg" -db)
    ;;
  *)
    # For h2h2 the upstream is HTTP/2 over TLS, trusting the throwaway CA.
    upstream_ca=""
    if [ "$MODE" = h2h2 ]; then upstream_ca=$CA; fi
    proxy_gateway_config "$WORK/gateway.toml" $BACKEND "$CERT" "$KEY" "$upstream_ca"
    proxy=("$BIN" gateway --config "$WORK/gateway.toml")
    ;;
esac

valgrind --tool=callgrind ${CALLGRIND_ARGS:-} --callgrind-out-file="$WORK/callgrind.out" "${proxy[@]}" 2>"$WORK/valgrind.log" &
PROXY=$!
for port in $BACKEND 19301; do
  for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
if [ "$MODE" = h1c ]; then
  url=http://127.0.0.1:19301/ proto=(--h1)
else
  url=https://127.0.0.1:19302/ proto=(-m 1)
fi
h2load "${proto[@]}" -n "$N" -c "${CONNECTIONS:-100}" -d "$WORK/body" -H 'content-type: application/octet-stream' "$url" \
  | grep -E '^(requests|status codes):'
# callgrind writes its counts when the proxy exits: SIGTERM drains the gateway and stops
# haproxy; nginx finishes its requests on SIGQUIT.
if [ "$WHO" = nginx ]; then kill -QUIT "$PROXY"; else kill -TERM "$PROXY"; fi
wait "$PROXY" || true
echo "$(basename "$WHO") $MODE, $N requests of $SIZE bytes:"
# With the cache model each line has nine counts, not one: wide enough for the last of them.
WIDTH=160
if [ -n "${CALLGRIND_ARGS:-}" ]; then WIDTH=260; fi
callgrind_annotate --auto=no --threshold=90 "$WORK/callgrind.out"* 2>/dev/null \
  | awk '/PROGRAM TOTALS/ { print; next }
         /%\)/ { p = $0; sub(/^[^(]*\( */, "", p); sub(/%.*/, "", p); if (p + 0 >= 1) print }' \
  | sed -E 's#/root/.cargo/registry/src/[^/]*/##; s#/rustc/[0-9a-f]+/##' | cut -c1-"$WIDTH"
