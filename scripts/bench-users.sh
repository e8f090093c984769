#!/usr/bin/env bash
# getAllUsers through the gateway, the way the dissertation measured it, on this machine:
#   A. 10 clients each sending 1 request/s over HTTP/2 with TLS (its k6 load test), mean and p99;
#   B. 100 closed-loop clients without think time, through the gateway and straight to the users
#      service, over h2c and over HTTP/1.1, with the gateway/direct throughput ratio;
#   C. where the time goes: one client at 10 req/s on each hop of the path, from a no-op answer
#      to the full call through the gateway with TLS;
#   and, over B's runs, the CPU time per request of `pms up` and of PostgreSQL.
# PostgreSQL behind the users service (a throwaway cluster from scripts/pg.sh), the six seeded
# users, `pms up` in release mode. Everything on 127.0.0.1; every run bounded in time. Tools
# (h2load, wrk) are installed from Debian's packages when missing and running as root.
#
#   scripts/bench-users.sh [--duration SECONDS] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=30
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--duration S] [--out FILE]" >&2; exit 64 ;;
  esac
done

. scripts/lib.sh
ensure_tools wrk:wrk h2load:nghttp2-client curl:curl

PROFILE=${PMS_PROFILE:-release}
cargo build --profile "$PROFILE" --quiet --bin pms
PMS=$PWD/target/$PROFILE/pms

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/pg.sh remove "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 200); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; exit 1
}

pg_url=$(scripts/pg.sh start "$work/pg" --watch $$)
psql "$pg_url" -q -c "CREATE DATABASE pms" >/dev/null
db_url="${pg_url%/*}/pms"

plain=$(free_port); tls=$(free_port); admin=$(free_port); users=$(free_port)
PMS_SEED_PASSWORD='Bench#Pass-2026' PMS_LOG=warn "$PMS" up --data-dir "$work/data" \
  --database-url "$db_url" --listen "127.0.0.1:$plain" --tls-listen "127.0.0.1:$tls" \
  --admin-listen "127.0.0.1:$admin" --users-listen "127.0.0.1:$users" >"$work/up.log" 2>&1 &
pids+=($!)
up_pid=$!
wait_port "$plain"; wait_port "$tls"; wait_port "$users"

token=$(curl -s -X POST -H 'content-type: application/json' \
  -d '{"email":"supervisor@isep.ipp.pt","password":"Bench#Pass-2026"}' \
  "http://127.0.0.1:$plain/users/login" | sed -E 's/.*"token":"([^"]+)".*/\1/')
[ -n "$token" ] || { echo "login failed" >&2; cat "$work/up.log" >&2; exit 1; }
auth="authorization: Bearer $token"
count=$(curl -s -H "$auth" "http://127.0.0.1:$plain/users/getAllUsers" | grep -o '"firstName"' | wc -l)
[ "$count" = 6 ] || { echo "expected 6 users, got $count" >&2; exit 1; }

# Per-request latencies from h2load's log (start µs, status, duration µs) → statistics.
stats() {
  python3 - "$1" <<'PY'
import sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
d = sorted(int(r[2]) / 1000 for r in rows)
bad = sum(1 for r in rows if r[1] != "200")
def pct(p):
    return d[min(len(d) - 1, int(round(p / 100 * len(d) + 0.5)) - 1)]
print(f"{len(d)} {bad} {sum(d)/len(d):.3f} {pct(50):.3f} {pct(99):.3f} {d[-1]:.3f}")
PY
}

# h2load: "finished in …, N req/s" → N.
h2_rps() { sed -nE 's/^finished in .*, ([0-9.]+) req\/s.*/\1/p' "$1"; }
wrk_rps() { sed -nE 's/^Requests\/sec: *([0-9.]+).*/\1/p' "$1"; }
h2_errors() { sed -nE 's/^requests: .* ([0-9]+) failed, ([0-9]+) errored.*/\1 failed, \2 errored/p' "$1"; }
h2_requests() { sed -nE 's/^requests: ([0-9]+) total.*/\1/p' "$1"; }
wrk_requests() { sed -nE 's/^ *([0-9]+) requests in .*/\1/p' "$1"; }
# cpu_row FILE REQUESTS: "pms µs | PostgreSQL µs" per request over that run.
cpu_row() {
  local pms pg
  read -r pms pg <"$1.cpu"
  echo "$(us_per_request "$pms" "$2") | $(us_per_request "$pg" "$2")"
}
wrk_errors() { local e; e=$(grep -E "Non-2xx|Socket errors" "$1" | tr -s ' ' | paste -sd';' - || true); echo "${e:-none}"; }

echo "warm-up: 2 s of closed-loop load through the gateway (opens the database pool)"
h2load -c 10 -m 1 -D 2 -H "$auth" "https://127.0.0.1:$tls/users/getAllUsers" >/dev/null
echo "A: 10 clients x 1 req/s, h2 over TLS through the gateway, ${DURATION}s"
# Ten h2load processes of one client each, started 100 ms apart: ten users who each send a request
# every second, as the dissertation's k6 virtual users did. (One h2load with -c 10 --rps 1 fires all
# ten at the same instant every second, which measures a burst, not that load.)
a_pids=()
for i in $(seq 0 9); do
  h2load -c 1 -m 1 --rps 1 -D "$DURATION" -H "$auth" --log-file="$work/a$i.log" \
    "https://127.0.0.1:$tls/users/getAllUsers" >"$work/a$i.txt" &
  a_pids+=($!)
  sleep 0.1
done
wait "${a_pids[@]}"
cat "$work"/a?.log >"$work/a.log"
read -r a_n a_bad a_mean a_p50 a_p99 a_max < <(stats "$work/a.log")

echo "B: 100 closed-loop clients, ${DURATION}s each (gateway h2c, direct h2c, gateway h1, direct h1)"
# measure_cpu OUT COMMAND...: runs COMMAND with its output in OUT, and notes the CPU time
# `pms up` (gateway + users service) and PostgreSQL (the postmaster and its backends) spent over
# it in OUT.cpu as "pms_ticks postgres_ticks".
pg_pid=$(head -1 "$work/pg/data/postmaster.pid")
measure_cpu() {
  local out=$1 pms0 pg0
  shift
  pms0=$(cpu_ticks "$up_pid"); pg0=$(cpu_ticks "$pg_pid")
  "$@" >"$out"
  echo "$(( $(cpu_ticks "$up_pid") - pms0 )) $(( $(cpu_ticks "$pg_pid") - pg0 ))" >"$out.cpu"
}
run_h2() {
  h2load -c 100 -m 1 -D 2 -H "$auth" "$1" >/dev/null # warm-up, outside the measured CPU time
  measure_cpu "$2" h2load -c 100 -m 1 -D "$DURATION" -H "$auth" "$1"
}
run_h1() { measure_cpu "$2" wrk -t 2 -c 100 -d "${DURATION}s" --latency -H "$auth" "$1"; }
run_h2 "http://127.0.0.1:$plain/users/getAllUsers" "$work/b_gw_h2.txt"
run_h2 "http://127.0.0.1:$users/users/getAllUsers" "$work/b_direct_h2.txt"
run_h1 "http://127.0.0.1:$plain/users/getAllUsers" "$work/b_gw_h1.txt"
run_h1 "http://127.0.0.1:$users/users/getAllUsers" "$work/b_direct_h1.txt"
echo "C: one client at 10 req/s on each hop (6 s each)"
hop() {
  rm -f "$work/c.log"
  h2load -c 1 -m 1 --rps 10 -D 6 -H "$auth" --log-file="$work/c.log" "$2" >/dev/null
  read -r n bad mean p50 p99 max < <(stats "$work/c.log")
  echo "| $1 | $n | $bad | $mean | $p50 | $p99 |"
}
c_rows=$(
  hop "gateway admin /healthz (no-op, h2c)" "http://127.0.0.1:$admin/healthz"
  hop "users /healthz (no-op, h2c)" "http://127.0.0.1:$users/healthz"
  hop "users /readyz (one database round trip)" "http://127.0.0.1:$users/readyz"
  hop "users getAllUsers, direct (h2c)" "http://127.0.0.1:$users/users/getAllUsers"
  hop "getAllUsers through the gateway (h2c)" "http://127.0.0.1:$plain/users/getAllUsers"
  hop "getAllUsers through the gateway (h2 + TLS)" "https://127.0.0.1:$tls/users/getAllUsers"
)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$up_pid/status")

gw_h2=$(h2_rps "$work/b_gw_h2.txt"); d_h2=$(h2_rps "$work/b_direct_h2.txt")
gw_h1=$(wrk_rps "$work/b_gw_h1.txt"); d_h1=$(wrk_rps "$work/b_direct_h1.txt")
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

report=$(cat <<TXT
getAllUsers (6 users, PostgreSQL), pms up ($PROFILE), $(nproc) cores, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)

A. 10 clients x 1 req/s over h2+TLS through the gateway (${DURATION}s; dissertation: Ballerina native 7.06 ms mean)
| requests | non-200 | mean ms | p50 ms | p99 ms | max ms |
| --- | --- | --- | --- | --- | --- |
| $a_n | $a_bad | $a_mean | $a_p50 | $a_p99 | $a_max |

B. 100 closed-loop clients, no think time (${DURATION}s each)
| protocol | through gateway req/s | direct req/s | gateway / direct | errors (gateway, direct) |
| --- | --- | --- | --- | --- |
| h2c (h2load) | $gw_h2 | $d_h2 | $(ratio "$gw_h2" "$d_h2") | $(h2_errors "$work/b_gw_h2.txt"), $(h2_errors "$work/b_direct_h2.txt") |
| HTTP/1.1 (wrk) | $gw_h1 | $d_h1 | $(ratio "$gw_h1" "$d_h1") | $(wrk_errors "$work/b_gw_h1.txt"), $(wrk_errors "$work/b_direct_h1.txt") |

CPU per request over the same runs (pms up: gateway + users service; PostgreSQL: postmaster + backends)
| protocol | path | pms µs | PostgreSQL µs |
| --- | --- | --- | --- |
| h2c | through gateway | $(cpu_row "$work/b_gw_h2.txt" "$(h2_requests "$work/b_gw_h2.txt")") |
| h2c | direct | $(cpu_row "$work/b_direct_h2.txt" "$(h2_requests "$work/b_direct_h2.txt")") |
| HTTP/1.1 | through gateway | $(cpu_row "$work/b_gw_h1.txt" "$(wrk_requests "$work/b_gw_h1.txt")") |
| HTTP/1.1 | direct | $(cpu_row "$work/b_direct_h1.txt" "$(wrk_requests "$work/b_direct_h1.txt")") |

C. One client, 10 req/s, per hop (6 s each)
| target | requests | non-200 | mean ms | p50 ms | p99 ms |
| --- | --- | --- | --- | --- | --- |
$c_rows

Peak RSS of the pms up process (gateway + users + echo): $((rss_kb / 1024)) MB
TXT
)
echo
echo "$report"
[ -z "$OUT" ] || echo "$report" >"$OUT"
