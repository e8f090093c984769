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

# us_per_request TICKS REQUESTS: CPU time per request in µs, one decimal ("-" without requests).
us_per_request() {
  awk -v t="$1" -v n="${2:-0}" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n; else printf "-" }'
}

# proxy_gateway_config FILE ECHO_PORT CERT KEY: the gateway the proxy benchmark measures, written
# to FILE: admin on 127.0.0.1:19901, cleartext HTTP/1.1 and h2c on 19301, TLS (h2, http/1.1) on
# 19302, every path to the echo back-end on ECHO_PORT over HTTP/1.1.
proxy_gateway_config() {
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
endpoints = ["http://127.0.0.1:$2"]
protocol = "h1"
[[routes]]
match = { path_prefix = "/" }
upstream = "echo"
GW
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
