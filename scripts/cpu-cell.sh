#!/usr/bin/env bash
# Where the CPU goes in one cleartext HTTP/1.1 passthrough cell of `pms bench suite
# ballerina-rest`, run the way the suite runs it (`pms echo`, the proxy, `pms bench run` closed
# model: 5 s ramp-up, 10 s warm-up, 40 s) on this one machine: CPU time per request of the proxy,
# the echo and the load generator from the end of warm-up to near the end (24 s), how busy the
# cores were, and the proxy's peak RSS. When the cores are all busy, throughput is their sum's
# inverse, so this says which process a lost cell's requests went to. BIN is the pms build that
# runs the echo and the load (and the proxy, for `pms`); the proxy is `pms` (the proxy
# benchmark's gateway) or `haproxy` (the suite's config/peers/haproxy.cfg).
#
#   scripts/cpu-cell.sh BIN pms|haproxy USERS SIZE
#   e.g. for b in /tmp/pms-old target/release/pms; do scripts/cpu-cell.sh $b pms 1000 10000; done
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 4 ]; then sed -n '2,12p' "$0"; exit 2; fi
BIN=$1 PROXY=$2 USERS=$3 SIZE=$4
. scripts/lib.sh
ECHO_PORT=19050
require_free_ports $ECHO_PORT 19301 19901
make_workdir

"$BIN" echo --listen 127.0.0.1:$ECHO_PORT --delay-ms 0 --http1-only >"$WORK/echo.log" 2>&1 &
ECHO=$!; PIDS+=("$ECHO")
case $PROXY in
  pms)
    # Its TLS listener is not used here; the files only have to exist.
    "$BIN" certs dev --out "$WORK/certs" >/dev/null
    proxy_gateway_config "$WORK/gateway.toml" $ECHO_PORT "$WORK/certs/server.pem" "$WORK/certs/server-key.pem"
    PMS_LOG=warn "$BIN" gateway --config "$WORK/gateway.toml" >"$WORK/proxy.log" 2>&1 &
    ;;
  haproxy)
    sed -e "s/{{threads}}/$(nproc)/; s/{{maxconn}}/9950/; s/{{port}}/19301/; s/{{bind_tls}}//" \
      -e "s/{{backend_port}}/$ECHO_PORT/; s/{{server_tls}}//" config/peers/haproxy.cfg >"$WORK/haproxy.cfg"
    haproxy -f "$WORK/haproxy.cfg" -db >"$WORK/proxy.log" 2>&1 &
    ;;
  *) echo "the proxy is pms or haproxy, not $PROXY" >&2; exit 2 ;;
esac
PX=$!; PIDS+=("$PX")
sleep 1
"$BIN" bench run http://127.0.0.1:19301/passthrough --method POST -H 'Content-Type: application/json' \
  --http 1.1 --payload-size "$SIZE" --expect-body "${SIZE}B" --users "$USERS" --ramp-up 5s \
  --duration 40s --warmup 10s --timeout 30s --progress never --out "$WORK/load" >"$WORK/load.log" 2>&1 &
LOAD=$!; PIDS+=("$LOAD")
sleep 15
before=("$(cpu_ticks $PX)" "$(cpu_ticks $ECHO)" "$(cpu_ticks $LOAD)"); t0=$(date +%s.%N)
sleep 24
after=("$(cpu_ticks $PX)" "$(cpu_ticks $ECHO)" "$(cpu_ticks $LOAD)"); t1=$(date +%s.%N)
peak=$(peak_rss $PX)
wait $LOAD
rate=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['labels'][0]['throughput'])" "$WORK/load/result.json")
requests=$(awk -v r="$rate" -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", r * (b - a) }')
used=(); for i in 0 1 2; do used+=($((after[i] - before[i]))); done
busy=$(awk -v t=$((used[0] + used[1] + used[2])) -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { printf "%.2f", t / hz / (b - a) }')
printf '%-8s %6.0f req/s  CPU µs/request: proxy %s  echo %s  load %s  total %s  cores busy %s of %s  proxy peak RSS %s MB\n' \
  "$PROXY" "$rate" "$(us_per_request ${used[0]} "$requests")" "$(us_per_request ${used[1]} "$requests")" \
  "$(us_per_request ${used[2]} "$requests")" "$(us_per_request $((used[0] + used[1] + used[2])) "$requests")" \
  "$busy" "$(nproc)" "$peak"
