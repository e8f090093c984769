#!/usr/bin/env bash
# Side-by-side reverse-proxy benchmark on this machine, in one run: the PMS gateway, nginx and
# haproxy in front of the same `pms echo`, loaded by wrk (HTTP/1.1, cleartext and TLS) and h2load
# (HTTP/2 over TLS), 100 keep-alive connections posting ARRAY payloads (500 bytes unless --size).
# Prints one table with throughput, p99 latency, the ratio to the better of nginx/haproxy, each
# proxy's CPU time per request, its anonymous memory and its peak RSS.
#
# Everything listens on 127.0.0.1 and every run is bounded in time. Missing tools (nginx, haproxy,
# wrk, h2load) are installed from Debian's packages when running as root.
#
# With --rounds N every target runs once per round, in turn, so slow drift of a shared machine
# hits all of them alike; the table shows medians and each ratio's median over the rounds (each
# ratio taken within one round).
#
# With --ceiling, cleartext HTTP/1.1 also runs through a TCP relay that parses nothing
# (crates/gateway/examples/tcp_relay.rs): what no HTTP proxy on this machine can beat.
#
# The echo's CPU per request is in the table too: it shares the cores, so a costlier back-end
# pulls every proxy's ratio towards 1. --hyper-echo runs it with --no-fast-path (every request
# through hyper), as the runs before 28 did.
#
# The gateway runs with its default socket driver (runtime.io = "auto": io_uring where the kernel
# allows it). With --epoll a second gateway runs beside it, the same config with
# `runtime.io = "epoll"`, as target pms-epoll.
#
# With --baseline BIN a gateway run by another `pms` binary (an earlier build, say) runs beside it,
# the same config, as target pms-base: a change set against the code before it, in one session.
#
#   scripts/bench-proxies.sh [--duration SECONDS] [--connections N] [--size BYTES] [--rounds N]
#                            [--ceiling] [--hyper-echo] [--epoll] [--baseline BIN] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=10
CONNECTIONS=100
WARMUP=2
ROUNDS=1
SIZE=500
OUT=""
CEILING=0
EPOLL=0
BASELINE=""
ECHO_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --connections) CONNECTIONS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --ceiling) CEILING=1; shift ;;
    --epoll) EPOLL=1; shift ;;
    --baseline) BASELINE=$(realpath "$2"); shift 2 ;;
    --hyper-echo) ECHO_ARGS=(--no-fast-path); shift ;;
    *) echo "usage: $0 [--duration S] [--connections N] [--size BYTES] [--rounds N] [--ceiling] [--hyper-echo] [--epoll] [--baseline BIN] [--out FILE]" >&2; exit 64 ;;
  esac
done

. scripts/lib.sh
ensure_tools nginx:nginx-light haproxy:haproxy wrk:wrk h2load:nghttp2-client

# PMS_PROFILE=quick gives a faster, slightly slower-running build for iterating.
PROFILE=${PMS_PROFILE:-release}
cargo build --profile "$PROFILE" --quiet --bin pms
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
PMS=$TARGET_DIR/$PROFILE/pms
if [ "$CEILING" = 1 ]; then
  cargo build --profile "$PROFILE" --quiet -p pms-gateway --example tcp_relay
fi

# Every target must be the process this script starts: a leftover listener on one of these
# ports (an echo or gateway from an earlier run) would be measured in its place.
require_free_ports 18688 19101 19102 19201 19202 19301 19302 19401 19501 19502 19901 19902

make_workdir

ECHO_PORT=18688
"$PMS" certs dev --out "$WORK/certs" >/dev/null
CERT=$WORK/certs/server.pem KEY=$WORK/certs/server-key.pem
cat "$CERT" "$KEY" > "$WORK/haproxy.pem"

# The payload: the published ARRAY format, exactly $SIZE bytes.
python3 - "$WORK/body.json" "$SIZE" <<'PY'
import sys
n = int(sys.argv[2])
alpha = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
k = 0
def take(c):
    global k
    s = "".join(alpha[(k + i) % len(alpha)] for i in range(c)); k += c; return s
out = '{"size":"%dB","payload":["' % n
out += take(min(10, n - len(out) - 4)) + '"'
while True:
    rem = n - len(out) - 2
    if rem >= 13: out += ',"' + take(10) + '"'
    elif rem >= 4: out += ',"' + take(rem - 3) + '"'
    else: out = out[:-1] + take(rem) + '"'; break
out += "]}"
assert len(out) == n
open(sys.argv[1], "w").write(out)
PY
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$WORK/body.json", "rb"); wrk.body = f:read("*a"); f:close()
LUA

"$PMS" echo --listen 127.0.0.1:$ECHO_PORT "${ECHO_ARGS[@]}" 2>/dev/null & PIDS+=($!)
ECHO_PID=$!

nginx_proxy_config "$WORK" $ECHO_PORT 19101 19102 "$CERT" "$KEY" 256
nginx -c "$WORK/nginx.conf" -g 'daemon off;' 2>/dev/null & PIDS+=($!)
NGINX_PID=$!

cat > "$WORK/haproxy.cfg" <<HAP
global
  nbthread $(nproc)
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:19201
  bind 127.0.0.1:19202 ssl crt $WORK/haproxy.pem alpn h2,http/1.1
  default_backend be
backend be
  server echo 127.0.0.1:$ECHO_PORT
HAP
haproxy -f "$WORK/haproxy.cfg" -db 2>/dev/null & PIDS+=($!)
HAPROXY_PID=$!

proxy_gateway_config "$WORK/gateway.toml" $ECHO_PORT "$CERT" "$KEY"
"$PMS" gateway --config "$WORK/gateway.toml" 2>/dev/null & PIDS+=($!)
PMS_PID=$!

RELAY_PID=""
ports=($ECHO_PORT 19101 19102 19201 19202 19301 19302)
EPOLL_PID=""
if [ "$EPOLL" = 1 ]; then
  { printf '[runtime]\nio = "epoll"\n'
    sed 's/19301/19501/; s/19302/19502/; s/19901/19902/' "$WORK/gateway.toml"; } > "$WORK/gateway-epoll.toml"
  "$PMS" gateway --config "$WORK/gateway-epoll.toml" 2>/dev/null & PIDS+=($!)
  EPOLL_PID=$!
  ports+=(19501 19502)
fi
BASE_PID=""
if [ -n "$BASELINE" ]; then
  sed 's/19301/19601/; s/19302/19602/; s/19901/19903/' "$WORK/gateway.toml" > "$WORK/gateway-base.toml"
  "$BASELINE" gateway --config "$WORK/gateway-base.toml" 2>/dev/null & PIDS+=($!)
  BASE_PID=$!
  ports+=(19601 19602)
fi
if [ "$CEILING" = 1 ]; then
  "$TARGET_DIR/$PROFILE/examples/tcp_relay" 127.0.0.1:19401 127.0.0.1:$ECHO_PORT & PIDS+=($!)
  RELAY_PID=$!
  ports+=(19401)
fi

for port in "${ports[@]}"; do
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
done

# The proxy's CPU time per request over the measured part of a run, in µs: "-" without a proxy.
cpu_per_request() {
  local pid=$1 before=$2 requests=$3
  [ -n "$pid" ] || { echo "-"; return; }
  us_per_request "$(( $(cpu_ticks "$pid") - before ))" "$requests"
}

# wrk, warm-up then the measured run: prints
# "req/s p99_ms non2xx cpu_us_per_request echo_cpu_us_per_request"
run_wrk() {
  local url=$1 pid=$2 before echo_before out
  wrk -t2 -c"$CONNECTIONS" -d"${WARMUP}s" -s "$WORK/post.lua" "$url" >/dev/null 2>&1 || true
  before=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0)
  echo_before=$(cpu_ticks "$ECHO_PID")
  out=$(wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$WORK/post.lua" "$url" 2>/dev/null | awk '
    /requests in/ { n = $1 }
    /Requests\/sec/ { rps = $2 }
    /^ +99%/ { v = $2; if (v ~ /us$/) { sub(/us/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms/, "", v) } else if (v ~ /s$/) { sub(/s/, "", v); v *= 1000 }; p99 = v }
    /Non-2xx/ { bad = $NF }
    END { printf "%s %s %s %d\n", (rps == "" ? 0 : rps), (p99 == "" ? "-" : p99), (bad == "" ? 0 : bad), n }')
  set -- $out
  echo "$1 $2 $3 $(cpu_per_request "$pid" "$before" "$4") $(cpu_per_request "$ECHO_PID" "$echo_before" "$4")"
}

# h2load over TLS with ALPN h2, warm-up then the measured run: prints
# "req/s - non2xx cpu_us_per_request echo_cpu_us_per_request" (h2load reports no percentiles)
run_h2load() {
  local url=$1 pid=$2 before echo_before out
  # h2load waits for the requests still out when its time is up; a proxy that stops answering
  # (nginx over HTTP/2 at 1,000 connections and 10 KB, once) would hold it forever.
  timeout $((WARMUP + 30)) h2load -c"$CONNECTIONS" -t2 -m1 -D"$WARMUP" -d "$WORK/body.json" -H 'content-type: application/json' "$url" >/dev/null 2>&1 || true
  before=$( [ -n "$pid" ] && cpu_ticks "$pid" || echo 0)
  echo_before=$(cpu_ticks "$ECHO_PID")
  out=$({ timeout $((DURATION + 30)) h2load -c"$CONNECTIONS" -t2 -m1 -D"$DURATION" -d "$WORK/body.json" -H 'content-type: application/json' "$url" 2>/dev/null || true; } | awk '
    /^finished in/ { rps = $4 }
    /^requests:/ { n = $8 }
    /^status codes:/ { gsub(",", ""); bad = $5 + $7 + $9 }
    END { printf "%s %s %s %d\n", (rps == "" ? 0 : rps), "-", (bad == "" ? 0 : bad), n }')
  set -- $out
  echo "$1 $2 $3 $(cpu_per_request "$pid" "$before" "$4") $(cpu_per_request "$ECHO_PID" "$echo_before" "$4")"
}

scenarios=("h1c->h1c" "h1(TLS)->h1c" "h2(TLS)->h1c")
targets=("direct" "nginx" "haproxy" "pms")
[ "$EPOLL" = 1 ] && targets+=("pms-epoll")
[ -n "$BASELINE" ] && targets+=("pms-base")
[ "$CEILING" = 1 ] && targets+=("relay")
declare -A URL
URL["direct,h1c->h1c"]="http://127.0.0.1:$ECHO_PORT/passthrough"
URL["nginx,h1c->h1c"]="http://127.0.0.1:19101/passthrough"
URL["haproxy,h1c->h1c"]="http://127.0.0.1:19201/passthrough"
URL["pms,h1c->h1c"]="http://127.0.0.1:19301/passthrough"
URL["nginx,h1(TLS)->h1c"]="https://127.0.0.1:19102/passthrough"
URL["haproxy,h1(TLS)->h1c"]="https://127.0.0.1:19202/passthrough"
URL["pms,h1(TLS)->h1c"]="https://127.0.0.1:19302/passthrough"
URL["nginx,h2(TLS)->h1c"]="https://127.0.0.1:19102/passthrough"
URL["haproxy,h2(TLS)->h1c"]="https://127.0.0.1:19202/passthrough"
URL["pms,h2(TLS)->h1c"]="https://127.0.0.1:19302/passthrough"
URL["relay,h1c->h1c"]="http://127.0.0.1:19401/passthrough"
URL["pms-epoll,h1c->h1c"]="http://127.0.0.1:19501/passthrough"
URL["pms-epoll,h1(TLS)->h1c"]="https://127.0.0.1:19502/passthrough"
URL["pms-epoll,h2(TLS)->h1c"]="https://127.0.0.1:19502/passthrough"
URL["pms-base,h1c->h1c"]="http://127.0.0.1:19601/passthrough"
URL["pms-base,h1(TLS)->h1c"]="https://127.0.0.1:19602/passthrough"
URL["pms-base,h2(TLS)->h1c"]="https://127.0.0.1:19602/passthrough"

declare -A PID_OF=([nginx]=$NGINX_PID [haproxy]=$HAPROXY_PID [pms]=$PMS_PID [pms-epoll]=$EPOLL_PID [pms-base]=$BASE_PID [relay]=$RELAY_PID)

# Every sample: "round scenario target rps p99 non2xx cpu_us anon_mb echo_cpu_us", one per line.
SAMPLES=$WORK/samples.txt
for round in $(seq "$ROUNDS"); do
  for s in "${scenarios[@]}"; do
    for t in "${targets[@]}"; do
      url=${URL["$t,$s"]:-}
      [ -n "$url" ] || continue
      echo "round $round/$ROUNDS: $s via $t ($DURATION s)..." >&2
      pid=${PID_OF[$t]:-}
      if [ "$s" = "h2(TLS)->h1c" ]; then read -r r p b c e < <(run_h2load "$url" "$pid"); else read -r r p b c e < <(run_wrk "$url" "$pid"); fi
      anon=$( [ -n "$pid" ] && anon_mb "$pid" || echo -)
      echo "$round $s $t ${r:-0} ${p:--} ${b:-0} ${c:--} $anon ${e:--}" >> "$SAMPLES"
    done
  done
done

# Medians per target, and per-round ratios to the better peer of that round.
summary() {
  python3 - "$SAMPLES" "$1" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
scenario = sys.argv[2]
by = collections.defaultdict(dict)
for rnd, s, t, rps, p99, bad, cpu, anon, echo in rows:
    if s == scenario:
        by[t][rnd] = (float(rps), p99, int(float(bad)), cpu, anon, echo)
def med(xs):
    return statistics.median(xs) if xs else float("nan")
for t in ["direct", "nginx", "haproxy", "pms", "pms-epoll", "pms-base", "relay"]:
    if t not in by:
        continue
    ratios = []
    for rnd, (rps, *_) in by[t].items():
        peers = [by[p][rnd][0] for p in ("nginx", "haproxy") if p in by and rnd in by[p]]
        if peers and max(peers) > 0:
            ratios.append(rps / max(peers))
    rps = med([v[0] for v in by[t].values()])
    p99s = [float(v[1]) for v in by[t].values() if v[1] != "-"]
    bad = sum(v[2] for v in by[t].values())
    cpus = [float(v[3]) for v in by[t].values() if v[3] != "-"]
    echoes = [float(v[5]) for v in by[t].values() if v[5] != "-"]
    first = by[t][min(by[t], key=int)][4]
    rr = "%.2f (%.2f–%.2f)" % (med(ratios), min(ratios), max(ratios)) if ratios else "-"
    print("%s|%.0f|%s|%d|%s|%s|%s|%s" % (t, rps, "%.2f" % med(p99s) if p99s else "-", bad, rr,
                                         "%.1f" % med(cpus) if cpus else "-",
                                         "%.1f" % med(echoes) if echoes else "-", first))
PY
}

# pms (and the relay) round by round, per scenario: the ratio to the better peer and to nginx
# (the TLS and HTTP/2 targets are set against nginx), so a median can be told from a spread.
rounds() {
  python3 - "$SAMPLES" "$@" <<'PY'
import collections, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
rps = collections.defaultdict(dict)
for rnd, s, t, r, *_ in rows:
    rps[(s, t)][int(rnd)] = float(r)
print("Round by round, ÷ better peer / ÷ nginx:")
print()
for s in sys.argv[2:]:
    for t in ("pms", "pms-epoll", "pms-base", "relay"):
        cells = []
        for rnd in sorted(rps[(s, t)]):
            peers = [rps[(s, p)].get(rnd, 0.0) for p in ("nginx", "haproxy")]
            if max(peers) > 0 and peers[0] > 0:
                mine = rps[(s, t)][rnd]
                cells.append("%.2f/%.2f" % (mine / max(peers), mine / peers[0]))
        if cells:
            print("- %s, %s: %s" % (s, t, " ".join(cells)))
PY
}

{
  echo "# Reverse proxies side by side — $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r); client, proxies and echo share it."
  echo "Versions: $("$PMS" --version), nginx $(nginx -v 2>&1 | sed 's/.*\///'), haproxy $(haproxy -v | awk 'NR==1 {print $3}'), $(wrk -v 2>&1 | awk 'NR==1 {print $1, $2}'), h2load $(h2load --version | awk '{print $NF}')."
  echo "Load: $CONNECTIONS keep-alive connections, $SIZE-byte POST, ${DURATION} s after ${WARMUP} s warm-up, $ROUNDS round(s); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo "Back-end: pms echo ${ECHO_ARGS[*]:-(HTTP/1.1 fast path)}."
  [ -z "$BASELINE" ] || echo "Baseline (pms-base): $BASELINE, $("$BASELINE" --version)."
  echo
  echo "| scenario | target | median req/s | median p99 ms | non-2xx | ratio to best peer, median (min–max) | proxy CPU µs/request | echo CPU µs/request | anonymous MB | peak RSS MB |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for s in "${scenarios[@]}"; do
    while IFS='|' read -r t r p b ratio cpu echo_cpu anon; do
      case $t in
        nginx) rss=$(peak_rss "$NGINX_PID") ;;
        haproxy) rss=$(peak_rss "$HAPROXY_PID") ;;
        pms) rss=$(peak_rss "$PMS_PID") ;;
        pms-epoll) rss=$(peak_rss "$EPOLL_PID") ;;
        pms-base) rss=$(peak_rss "$BASE_PID") ;;
        relay) rss=$(peak_rss "$RELAY_PID") ;;
        *) rss="-" ;;
      esac
      echo "| $s | $t | $r | $p | $b | $ratio | $cpu | $echo_cpu | $anon | $rss |"
    done < <(summary "$s")
  done
  echo
  rounds "${scenarios[@]}"
  echo
  echo "Ratios are taken within a round (same minute, same machine state). Peak RSS is each process's high-water mark over the whole run (nginx: master + workers); it counts the program's code pages, which the kernel maps in 64 KB runs around every page touched. Anonymous MB is the heap and stacks alone (RssAnon, read after the scenario's first round; freed memory stays with the allocator, so each scenario's figure includes the ones above it). h2load reports no percentiles, hence no p99 for HTTP/2. Proxy CPU is the proxy's user + system time over the measured part of each run divided by the requests it carried (median over the rounds): the cost that decides throughput when client, proxy and back-end share the cores. Echo CPU is the same for the back-end, behind that target."
} | tee "${OUT:-/dev/null}"
