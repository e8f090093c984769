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
