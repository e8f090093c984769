#!/usr/bin/env bash
# Where the CPU goes in one cleartext HTTP/1.1 passthrough cell of `pms bench suite
# ballerina-rest`, run the way the suite runs it (`pms echo`, the proxy, `pms bench run` closed
# model: 5 s ramp-up, 10 s warm-up, 40 s) on this one machine: CPU time per request of the proxy,
# the echo and the load generator from the end of warm-up to near the end (24 s), how busy the
# cores were, and the proxy's peak RSS. When the cores are all busy, throughput is their sum's
# inverse, so this says which process a lost cell's requests went to. BIN is the pms build that
# runs the echo and the load (and the proxy, for `pms`); the proxy is `pms` (the gateway, set up
# as the suite does) or `haproxy` (the suite's configuration).
#
#   scripts/cpu-cell.sh BIN pms|haproxy USERS SIZE
#   e.g. for b in /tmp/pms-old target/release/pms; do scripts/cpu-cell.sh $b pms 1000 10000; done
set -u -o pipefail
if [ $# -ne 4 ]; then sed -n '2,13p' "$0"; exit 2; fi
BIN=$1 PROXY=$2 USERS=$3 SIZE=$4
D=$(mktemp -d /tmp/cpucell.XXXX)
PE=$((20000 + RANDOM % 5000)); PP=$((26000 + RANDOM % 5000)); PA=$((31000 + RANDOM % 3000))
TCK=$(getconf CLK_TCK)
$BIN echo --listen 127.0.0.1:$PE --delay-ms 0 --http1-only >$D/echo.log 2>&1 & ECHO=$!
case $PROXY in
pms)
  cat >$D/g.toml <<T
[admin]
listen = "127.0.0.1:$PA"
[limits]
max_connections = 20000
[[listeners]]
name = "public"
listen = "127.0.0.1:$PP"
[[upstreams]]
name = "echo"
endpoints = ["http://127.0.0.1:$PE"]
protocol = "h1"
request_timeout_ms = 60000
[[routes]]
name = "passthrough"
match = { path = "/passthrough", methods = ["POST"] }
upstream = "echo"
T
  PMS_LOG=warn $BIN gateway --config $D/g.toml >$D/proxy.log 2>&1 & PX=$! ;;
haproxy)
  cat >$D/h.cfg <<T
global
  nbthread $(nproc)
  maxconn 9950
defaults
  mode http
  timeout connect 10s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:$PP
  default_backend be
backend be
  server echo 127.0.0.1:$PE
T
  haproxy -f $D/h.cfg >$D/proxy.log 2>&1 & PX=$! ;;
*) echo "proxy: pms or haproxy, not $PROXY" >&2; exit 2 ;;
esac
sleep 1
cpu() { # utime+stime (all threads) of a process and its children, in clock ticks
  local t=0 p
  for p in "$@" $(pgrep -P "$1" || true); do
    [ -r /proc/$p/stat ] && t=$((t + $(awk '{print $14+$15}' /proc/$p/stat)))
  done
  echo $t
}
$BIN bench run http://127.0.0.1:$PP/passthrough --method POST -H 'Content-Type: application/json' \
  --http 1.1 --payload-size $SIZE --expect-body ${SIZE}B --users $USERS --ramp-up 5s --duration 40s \
  --warmup 10s --timeout 30s --progress never --out $D/load >$D/load.log 2>&1 & LG=$!
sleep 15
a_e=$(cpu $ECHO); a_p=$(cpu $PX); a_l=$(cpu $LG); t0=$(date +%s.%N)
sleep 24
b_e=$(cpu $ECHO); b_p=$(cpu $PX); b_l=$(cpu $LG); t1=$(date +%s.%N)
hwm=0; for p in $PX $(pgrep -P $PX || true); do h=$(awk '/VmHWM/{print $2}' /proc/$p/status 2>/dev/null || echo 0); hwm=$((hwm + ${h:-0})); done
wait $LG
tp=$(python3 -c "import json;print(json.load(open('$D/load/result.json'))['labels'][0]['throughput'])" 2>/dev/null || grep -o '[0-9.]* req/s' $D/load.log | head -1)
python3 - "$PROXY" "$tp" "$t0" "$t1" $a_e $b_e $a_p $b_p $a_l $b_l $TCK $hwm <<'P'
import sys
name,tp,t0,t1=sys.argv[1],float(sys.argv[2].split()[0]),float(sys.argv[3]),float(sys.argv[4])
ae,be,ap,bp,al,bl,tck,hwm=map(int,sys.argv[5:])
reqs=tp*(t1-t0)
f=lambda a,b:(b-a)/tck/reqs*1e6
print(f"{name:8} {tp:9.0f} req/s  us/req: proxy {f(ap,bp):5.1f}  echo {f(ae,be):5.1f}  load {f(al,bl):5.1f}  total {f(ap+ae+al,bp+be+bl):5.1f}  cpu-util {((bp+be+bl)-(ap+ae+al))/tck/(t1-t0):.2f}  proxy peak RSS {hwm/1024:.1f} MB")
P
kill $PX $ECHO 2>/dev/null; wait 2>/dev/null
rm -rf $D
