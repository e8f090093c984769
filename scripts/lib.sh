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
