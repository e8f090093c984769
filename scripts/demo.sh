#!/usr/bin/env bash
# One command: build pms, start the echo back-end and the gateway in front of it (config/echo.toml),
# print what to try, and stop both on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet --bin pms
pms=target/release/pms

"$pms" echo --listen 127.0.0.1:8688 &
echo_pid=$!
"$pms" gateway --config config/echo.toml &
gw_pid=$!
trap 'kill -TERM $gw_pid $echo_pid 2>/dev/null; wait $gw_pid $echo_pid 2>/dev/null' EXIT INT TERM

for _ in $(seq 100); do
  curl -fsS http://127.0.0.1:9901/readyz >/dev/null 2>&1 && break
  sleep 0.05
done

cat <<'TXT'

PMS gateway on http://127.0.0.1:9090 in front of pms echo on 127.0.0.1:8688. Try:

  curl -s -X POST -H 'content-type: application/json' \
       --data '{"size":"50B","payload":["0123456789","ABCDEFGH"]}' http://127.0.0.1:9090/passthrough
  curl -s -X POST --data '{"size":"50B","payload":["0123456789","ABCDEFGH"]}' http://127.0.0.1:9090/transform
  curl -s --http2-prior-knowledge -X POST --data 'hello h2c' http://127.0.0.1:9090/passthrough
  curl -s http://127.0.0.1:9901/metrics

Ctrl-C stops both.
TXT
wait $gw_pid
