#!/usr/bin/env bash
# PMS as a cluster on one machine: PostgreSQL (scripts/pg.sh), NATS JetStream (Debian's
# nats-server), two replicas each of users, parks and payments, and one gateway with both
# replicas of each service as its endpoints, all on loopback. It drives customers' logins and
# cars in and out through the barriers, SIGKILLs one replica of each service halfway, goes on
# while they are down, restarts them, goes on again, and then checks the databases: every closed
# visit has exactly one invoice.
#
#   scripts/cluster.sh                  (target/debug/pms; PMS=path to use another binary)
#   VISITS=40 KEEP=1 scripts/cluster.sh (more visits; keep the logs and data in /tmp)
#
# It prints what every request got, by kind, and exits non-zero when a visit is without its
# invoice or has two. Requests that were in flight to a killed replica may fail (the gateway does
# not retry yet: issue 35); they are counted, not hidden.
set -euo pipefail
cd "$(dirname "$0")/.."

PMS=$(realpath "${PMS:-target/debug/pms}")
VISITS=${VISITS:-20}
[ -x "$PMS" ] || { echo "cluster.sh: no $PMS (cargo build first)" >&2; exit 2; }
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || { echo "cluster.sh: nats-server is needed (apt-get install nats-server)" >&2; exit 2; }
nats_server=$(command -v nats-server || echo /usr/sbin/nats-server)
psql=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql | head -1)

work=$(mktemp -d /tmp/pms-cluster.XXXXXX)
chmod 755 "$work" # the postgres user reaches its cluster inside
declare -A pid
cleanup() {
  for p in "${pid[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/pg.sh stop "$work/pg" >/dev/null 2>&1 || true
  if [ -n "${KEEP:-}" ]; then echo "logs and data kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# A loopback port free a moment ago, below the kernel's ephemeral range.
port() {
  python3 - <<'EOF'
import random, socket
while True:
    p = random.randrange(10000, 30000)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p)); print(p); break
        except OSError:
            pass
EOF
}

wait_ready() { # URL
  for _ in $(seq 1 300); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "cluster.sh: $1 never became ready" >&2
  exit 1
}

echo "== PostgreSQL and NATS"
db=$(scripts/pg.sh start "$work/pg")
nats_port=$(port)
"$nats_server" -js -sd "$work/nats" -a 127.0.0.1 -p "$nats_port" >"$work/nats.log" 2>&1 &
pid[nats]=$!
nats="nats://127.0.0.1:$nats_port"

export PMS_JWT_SECRET PMS_SEED_PASSWORD PMS_LOG=warn
PMS_JWT_SECRET=$(openssl rand -hex 32)
PMS_SEED_PASSWORD="Cluster#$(openssl rand -hex 4)"
openssl rand -hex 32 >"$work/device-secret"

declare -A listen
for svc in users parks payments; do for r in 1 2; do listen[$svc$r]=$(port); done; done

start() { # SERVICE REPLICA
  local svc=$1 r=$2 extra=()
  case $svc in
    users) extra=(--argon2-m-kib 64 --argon2-t 1) ;;
    parks) extra=(--device-secret-file "$work/device-secret") ;;
  esac
  "$PMS" "$svc" --listen "127.0.0.1:${listen[$svc$r]}" --data-dir "$work/$svc$r" \
    --database-url "$db" --nats-url "$nats" "${extra[@]}" >>"$work/$svc$r.log" 2>&1 &
  pid[$svc$r]=$!
}

echo "== two replicas of each service, started at once"
for r in 1 2; do for svc in users parks payments; do start "$svc" "$r"; done; done
for svc in users parks payments; do for r in 1 2; do wait_ready "http://127.0.0.1:${listen[$svc$r]}/readyz"; done; done

echo "== the gateway, with both replicas of each as endpoints"
gw=$(port)
admin=$(port)
python3 - "$gw" "$admin" "${listen[users1]}" "${listen[users2]}" "${listen[parks1]}" "${listen[parks2]}" \
  "${listen[payments1]}" "${listen[payments2]}" >"$work/gateway.toml" <<'EOF'
import sys
gw, admin, u1, u2, p1, p2, y1, y2 = sys.argv[1:]
ends = {"users": (u1, u2), "parks": (p1, p2), "payments": (y1, y2)}
upstream = None
for line in open("config/gateway.toml"):
    line = line.rstrip("\n")
    if line.startswith("name = ") and upstream == "":
        upstream = line.split('"')[1]
    if line.strip() == "[[upstreams]]":
        upstream = ""
    elif line.startswith("["):
        upstream = None
    if line == 'listen = "127.0.0.1:9901"':
        line = f'listen = "127.0.0.1:{admin}"'
    elif line == 'listen = "127.0.0.1:9090"':
        line = f'listen = "127.0.0.1:{gw}"'
    elif line.startswith("endpoints = ") and upstream in ends:
        a, b = ends[upstream]
        line = f'endpoints = ["http://127.0.0.1:{a}", "http://127.0.0.1:{b}"]\nfail_timeout_ms = 1000'
    print(line)
EOF
"$PMS" gateway --config "$work/gateway.toml" >"$work/gateway.log" 2>&1 &
pid[gateway]=$!
wait_ready "http://127.0.0.1:$admin/readyz"
base="http://127.0.0.1:$gw"

key1=$("$PMS" device key barrier 1 --device-secret-file "$work/device-secret")
key2=$("$PMS" device key barrier 2 --device-secret-file "$work/device-secret")
declare -A got
count() { got[$1]=$(( ${got[$1]:-0} + 1 )); }

login() { # EMAIL
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/users/login" \
    -H 'content-type: application/json' \
    -d "{\"email\":\"$1\",\"password\":\"$PMS_SEED_PASSWORD\"}" || echo 000)
  count "login $code"
}

pass() { # PLATE DIRECTION KEY BARRIER AT
  local out
  out=$(echo "$1" | "$PMS" device barrier --gateway "$base" --key "$3" --park 1 --barrier "$4" \
    --direction "$2" --at "$5" 2>&1 || true)
  if grep -q '"success":true' <<<"$out"; then count "$2 opened"; else
    count "$2 refused or failed"
    echo "   $2 $1 at $5: $out" >>"$work/refusals.log"
  fi
}

# Demo customers' cars; parks learns of them from the users service's events.
plates=(28-XQ-51 55-ND-41)
emails=(ruiSoares@isep.ipp.pt leoKim@isep.ipp.pt)
for _ in $(seq 1 100); do
  out=$(echo 28-XQ-51 | "$PMS" device barrier --gateway "$base" --key "$key1" --park 1 --barrier 1 \
    --direction entrance --at 2029-12-31T00:00:00Z 2>&1 || true)
  grep -q '"success":true' <<<"$out" && break
  sleep 0.2
done
echo 28-XQ-51 | "$PMS" device barrier --gateway "$base" --key "$key2" --park 1 --barrier 2 \
  --direction exit --at 2029-12-31T00:30:00Z >/dev/null

visit() { # I
  local i=$1 plate=${plates[$(( $1 % 2 ))]} day
  day=$(date -u -d "2030-01-01 + $i days" +%F)
  login "${emails[$(( i % 2 ))]}"
  pass "$plate" entrance "$key1" 1 "${day}T08:00:00Z"
  pass "$plate" exit "$key2" 2 "${day}T09:30:00Z"
}

echo "== $VISITS visits; one replica of each service killed halfway and restarted"
half=$(( VISITS / 2 ))
for i in $(seq 1 "$half"); do visit "$i"; done
for svc in users parks payments; do
  kill -9 "${pid[${svc}1]}"
  wait "${pid[${svc}1]}" 2>/dev/null || true
done
echo "   killed users1, parks1, payments1 (SIGKILL)"
for i in $(seq $(( half + 1 )) $(( half + half / 2 ))); do visit "$i"; done
for svc in users parks payments; do start "$svc" 1; done
for svc in users parks payments; do wait_ready "http://127.0.0.1:${listen[${svc}1]}/readyz"; done
echo "   restarted them"
for i in $(seq $(( half + half / 2 + 1 )) "$VISITS"); do visit "$i"; done

echo "== the databases"
sleep 3 # the last invoices come through the broker
q() { "$psql" -X -A -t -q "$db" -c "$1"; }
closed=$(q "SELECT count(*) FROM parks.visits WHERE left_at_ms IS NOT NULL")
invoices=$(q "SELECT count(*) FROM payments.invoices")
distinct=$(q "SELECT count(DISTINCT visit_id) FROM payments.invoices")
priced=$(q "SELECT count(*) FROM parks.visits WHERE left_at_ms IS NOT NULL AND invoice_id IS NOT NULL")

for k in "${!got[@]}"; do printf '   %-28s %s\n' "$k" "${got[$k]}"; done | sort
echo "   closed visits                $closed"
echo "   invoices                     $invoices ($distinct visits)"
echo "   visits with their invoice    $priced"
[ -s "$work/refusals.log" ] && { echo "   refusals and failures:"; cat "$work/refusals.log"; }
if [ "$closed" = "$invoices" ] && [ "$invoices" = "$distinct" ] && [ "$priced" = "$closed" ]; then
  echo "cluster: every closed visit has exactly one invoice"
else
  echo "cluster: FAIL: visits and invoices do not match" >&2
  exit 1
fi
