#!/usr/bin/env bash
# The public API's contract, checked and fuzzed against a real `pms up` through the gateway:
#   1. every service's OpenAPI document and the gateway's merged one (/openapi.json) pass
#      openapi-spec-validator;
#   2. Schemathesis runs every operation of /openapi.json once per role (a real login token for
#      SUPERVISOR, PARK_MANAGER, CUSTOMER_MANAGER and CUSTOMER; the device routes with barrier
#      1's and display 1's own keys), all its phases (examples,
#      coverage, fuzzing, stateful) and all its checks: no 5xx, every answer's status, content
#      type, headers and body as documented, schema-valid requests accepted and invalid ones
#      refused;
#   3. before those, scripts/fuzz-visits.py follows the customer's side of parking visits as
#      stateful sequences (register, log in, welcome coins and the wallet, add a vehicle, enter
#      and leave park 1, read the invoice), each sequence with the token of its own login.
#
# Usage: scripts/fuzz.sh [--ci | --long] [PMS_BINARY]
#   default: 8 examples per operation, every phase for every run, 40 visit sequences;
#   --ci: the same, but the coverage phase (boundary values of every schema, the slow one:
#         about three minutes a run on two cores) for the PARK_MANAGER run only, which reaches
#         the most operations;
#   --long: 200 examples per operation and 400 visit sequences, for a person to run.
# Logs go to target/fuzz/ROLE.log (the visits to target/fuzz/visits.log); the exit status is non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

examples=8
scenarios=40
ci=
case "${1:-}" in
  --long) examples=200; scenarios=400; shift ;;
  --ci) ci=1; shift ;;
esac
pms=${1:-target/debug/pms}
[ -x "$pms" ] || { echo "no pms binary at $pms (cargo build --bin pms)" >&2; exit 1; }

# One worker thread per run: CPython 3.11's `ast.parse` is not safe in two threads at once, and
# Hypothesis parses source to describe its strategies ("SystemError: AST constructor recursion
# depth mismatch", seen now and then with two workers). The runs are bound by Python's own CPU,
# so a second thread bought little.
#
# Pinned, so that a run is repeatable. anyio 4.15 builds its lazy imports by compiling its own
# source, which fails now and then when two of Schemathesis's worker threads first reach it at
# once ("SystemError: AST constructor recursion depth mismatch"); 4.14 does not.
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore schemathesis==4.32.5 \
  hypothesis==6.170.17 anyio==4.14.0 openapi-spec-validator==0.9.0

out=target/fuzz
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
up_pid=
cleanup() {
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
listen=$(free_port)
password='Fuzz#Seed-2026x'
PMS_SEED_PASSWORD=$password PMS_LOG=warn "$pms" up --data-dir "$work/data" \
  --listen "127.0.0.1:$listen" --tls-listen "127.0.0.1:$(free_port)" \
  --admin-listen "127.0.0.1:$(free_port)" \
  --users-listen 127.0.0.1:0 --parks-listen 127.0.0.1:0 \
  --payments-listen 127.0.0.1:0 --web-listen 127.0.0.1:0 \
  --argon2-m-kib 64 --argon2-t 1 --token-lifetime-s 86400 >"$out/pms-up.log" 2>&1 &
up_pid=$!
base="http://127.0.0.1:$listen"
for _ in $(seq 300); do
  curl -fs "$base/openapi.json" -o "$out/gateway.json" 2>/dev/null && break
  sleep 0.1
done
[ -s "$out/gateway.json" ] || { echo "pms up never served $base/openapi.json" >&2; exit 1; }

echo "== OpenAPI documents (openapi-spec-validator)"
for service in all users parks payments; do
  "$pms" openapi --service "$service" >"$out/$service.json"
done
openapi-spec-validator "$out/all.json" "$out/users.json" "$out/parks.json" "$out/payments.json" \
  "$out/gateway.json"

# A login token; retried, since earlier runs may have used up the login's rate limit.
token() {
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    curl -fs -X POST -H 'content-type: application/json' \
      -d "{\"email\":\"$1\",\"password\":\"$password\"}" "$base/users/login" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])' 2>/dev/null && return
    sleep 3
  done
  echo "no login for $1" >&2
  return 1
}

# One Schemathesis run: NAME, then its own options (credentials, which operations).
fuzz() {
  local name=$1
  shift
  echo "== Schemathesis: $name ($examples examples per operation)"
  if schemathesis --config-file scripts/schemathesis.toml run "$base/openapi.json" "$@" \
    --checks all \
    --max-examples "$examples" --workers 1 --rate-limit auto --request-timeout 35 \
    --seed 20261128 --no-color >"$out/$name.log" 2>&1; then
    grep -E "[0-9]+ generated" "$out/$name.log" | sed 's/^ */  /'
  else
    failed=1
    sed -n '/^=* \(FAILURES\|ERRORS\) =*$/,$p' "$out/$name.log"
  fi
}

failed=0
# Every role's token first: fuzzing the login can hold a seeded address for a while.
declare -A bearer
for who in supervisor:SUPERVISOR parkmanager:PARK_MANAGER customermanager:CUSTOMER_MANAGER \
  leoKim:CUSTOMER; do
  bearer[${who#*:}]=$(token "${who%%:*}@isep.ipp.pt") || failed=1
done

# The customer's visits: sequences that the runs below, one fixed credential each, cannot follow (a
# token from a login inside the sequence; park 1's entrance and exit barriers, each with its key).
# First, while the seed data is as shipped.
echo "== Schemathesis: visits ($scenarios stateful sequences)"
device_key() { "$pms" device key --data-dir "$work/data" barrier "$1"; }
if python3 scripts/fuzz-visits.py "$base" --bearer "${bearer[CUSTOMER_MANAGER]:-}" \
  --scenarios "$scenarios" --entrance "1:$(device_key 1)" --exit "2:$(device_key 2)" \
  >"$out/visits.log" 2>&1; then
  sed -n '1p;/^coins:/p;/^visits:/p;/^accounts:/p' "$out/visits.log" | sed 's/^/  /'
else
  failed=1
  cat "$out/visits.log"
fi

# The people: every operation a bearer token opens, once per role. The two open operations,
# logging in and registering, take no token: the PARK_MANAGER run, the most thorough, fuzzes them
# and the others leave them out (their rate limits would only make those runs wait; the visits
# above follow registrations on to logins, coins and cars).
for role in SUPERVISOR PARK_MANAGER CUSTOMER_MANAGER CUSTOMER; do
  [ -n "${bearer[$role]:-}" ] || continue
  options=()
  [ -n "$ci" ] && [ "$role" != PARK_MANAGER ] && options=(--phases examples,fuzzing,stateful)
  [ "$role" != PARK_MANAGER ] && options+=(--exclude-operation-id login --exclude-operation-id createUser)
  fuzz "$role" -H "Authorization: Bearer ${bearer[$role]}" \
    --exclude-path-regex '^/(barriers|display)/' "${options[@]}"
done
# The devices: barrier 1 (park 1's first entrance) and display 1, each with its own key. No
# stateful phase: the one link here, entrance -> exit, needs a second barrier's key (the visits
# above follow it).
fuzz barrier-1 -H "x-device-key: $("$pms" device key --data-dir "$work/data" barrier 1)" \
  --include-path-regex '^/(barriers/|display/update)' --phases examples,coverage,fuzzing
fuzz display-1 -H "x-device-key: $("$pms" device key --data-dir "$work/data" display 1)" \
  --include-path-regex '^/display/get' --phases examples,coverage,fuzzing
exit $failed
