# Shared by the benchmark scripts; source it, don't run it.

# ensure_tools COMMAND:PACKAGE ...: installs from Debian's packages the packages whose command is
# missing (when running as root), or names them and exits 1.
ensure_tools() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing: ${missing[*]} (install them, or run as root)" >&2; exit 1
  fi
}

# with_children PID...: the processes and their direct children, one PID per line.
with_children() {
  local q
  for q in "$@"; do
    echo "$q"
    pgrep -P "$q" || true
  done
}

# cpu_ticks PID...: CPU time (user + system) the processes and their children have used, in
# clock ticks (1/CLK_TCK s). A PID that has gone counts 0.
cpu_ticks() {
  local total=0 p t
  for p in $(with_children "$@"); do
    # Fields 14 and 15 of /proc/PID/stat, counted after the parenthesised command name.
    t=$(sed -E 's/.*\) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}') || t=0
    total=$((total + ${t:-0}))
  done
  echo "$total"
}

# anon_mb PID...: the processes' (and their children's) anonymous resident memory now, in MB, one
# decimal (a PID that has gone counts 0): the heap and stacks, without the program's code pages, which the kernel maps in 64 KB
# runs around each page touched and which other processes running the same binary share.
anon_mb() {
  local total=0 p kb
  for p in $(with_children "$@"); do
    kb=$(awk '/^RssAnon:/ {print $2}' "/proc/$p/status" 2>/dev/null) || kb=0
    total=$((total + ${kb:-0}))
  done
  awk -v kb="$total" 'BEGIN { printf "%.1f", kb / 1024 }'
}

# peak_rss PID: the peak RSS (VmHWM) of a process and its children, in MB, one decimal.
peak_rss() {
  local total=0 kb p
  for p in $(with_children "$1"); do
    kb=$(awk '/VmHWM/ {print $2}' /proc/$p/status 2>/dev/null || echo 0)
    total=$((total + ${kb:-0}))
  done
  awk -v kb="$total" 'BEGIN { printf "%.1f", kb / 1024 }'
}

# us_per_request TICKS REQUESTS: CPU time per request in µs, one decimal ("-" without requests).
us_per_request() {
  awk -v t="$1" -v n="${2:-0}" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n; else printf "-" }'
}

# proxy_gateway_config FILE ECHO_PORT CERT KEY [CA]: the gateway the proxy benchmark measures,
# written to FILE: admin on 127.0.0.1:19901, cleartext HTTP/1.1 and h2c on 19301, TLS (h2,
# http/1.1) on 19302, every path to the echo back-end on ECHO_PORT over HTTP/1.1; with CA, over
# HTTP/2 over TLS instead, trusting CA.
proxy_gateway_config() {
  local upstream
  if [ -n "${5:-}" ]; then
    upstream="endpoints = [\"https://127.0.0.1:$2\"]
protocol = \"h2\"
tls = { ca = \"$5\" }"
  else
    upstream="endpoints = [\"http://127.0.0.1:$2\"]
protocol = \"h1\""
  fi
  cat > "$1" <<GW
[admin]
listen = "127.0.0.1:19901"
[[listeners]]
name = "h1c"
listen = "127.0.0.1:19301"
[[listeners]]
name = "tls"
listen = "127.0.0.1:19302"
tls = { cert = "$3", key = "$4" }
[[upstreams]]
name = "echo"
$upstream
[[routes]]
match = { path_prefix = "/" }
upstream = "echo"
GW
}

# nginx_proxy_config DIR ECHO_PORT HTTP_PORT TLS_PORT CERT KEY KEEPALIVE [MAIN]: nginx as the
# proxy benchmarks run it, written to DIR/nginx.conf (its files under DIR/nginx): cleartext
# HTTP/1.1 on 127.0.0.1:HTTP_PORT, TLS (h2, http/1.1) on TLS_PORT, every path to the echo on
# ECHO_PORT over HTTP/1.1, keeping up to KEEPALIVE idle connections to it. MAIN is the main
# context's process line ("worker_processes auto;" unless given). Run it with -g 'daemon off;'.
nginx_proxy_config() {
  mkdir -p "$1/nginx"
  cat > "$1/nginx.conf" <<NGX
${8:-worker_processes auto;}
user root;
pid $1/nginx/nginx.pid;
error_log $1/nginx/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  # No cap on requests per connection, as in config/peers/nginx.conf: with nginx's default (1000)
  # it closes HTTP/1.1 connections and sends GOAWAY on HTTP/2 every 1000 requests. wrk reopens
  # (paying a new TLS handshake each time), h2load does not: its HTTP/2 connections die and
  # nginx's HTTP/2 figure stops at 100 x 1000 requests over the run. PMS and HAProxy have no cap.
  keepalive_requests 1000000;
  client_body_temp_path $1/nginx/body;
  proxy_temp_path $1/nginx/proxy;
  fastcgi_temp_path $1/nginx/fastcgi;
  uwsgi_temp_path $1/nginx/uwsgi;
  scgi_temp_path $1/nginx/scgi;
  upstream echo { server 127.0.0.1:$2; keepalive $7; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$3;
    listen 127.0.0.1:$4 ssl http2;
    ssl_certificate $5;
    ssl_certificate_key $6;
    location / {
      proxy_pass http://echo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGX
}

# require_free_ports PORT...: exits 1, naming the port, when something on 127.0.0.1 listens on one
# of them: a leftover echo or gateway from an earlier run would be measured in place of the one
# the script starts.
require_free_ports() {
  local port
  for port in "$@"; do
    if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      echo "port $port on 127.0.0.1 is in use; stop what listens there first (ss -ltnp 'sport = :$port')" >&2
      exit 1
    fi
  done
}

# make_workdir: sets WORK to a fresh temporary directory and PIDS to an empty list; on exit the
# processes in PIDS get SIGTERM and are waited for, and WORK is deleted.
make_workdir() {
  WORK=$(mktemp -d)
  PIDS=()
  trap remove_workdir EXIT
}

remove_workdir() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
