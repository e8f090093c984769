#!/usr/bin/env bash
# Everything CI checks, in one command: formatting, lints, docs, and every test (unit,
# integration over real sockets, and the real `pms` binary). Debug builds; no network beyond
# the package registries; all servers on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# Each phase prints its heading; the wall time of every phase is printed at the end, so a slow
# CI run shows where its minutes went.
timings=
phase_name=
phase_start=$SECONDS
phase() {
  [ -z "$phase_name" ] || timings+=$(printf '%6ds  %s' $((SECONDS - phase_start)) "$phase_name")$'\n'
  phase_name=$1
  phase_start=$SECONDS
  [ -z "$1" ] || echo "== $1"
}

phase "cargo fmt --check"
cargo fmt --all -- --check

phase "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

phase "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items --locked --quiet

phase "cargo test: build"
cargo test --workspace --locked --no-run --quiet

phase "cargo test: run"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"

# The gateway's integration suite again with every gateway on epoll (runtime.io; the default,
# auto, takes io_uring where the kernel allows it), so both socket drivers pass the same tests.
# The binary the workspace build made is run as cargo would (from the crate's directory): `cargo
# test -p pms-gateway` would resolve other dependency features and rebuild half the tree.
phase "gateway integration tests on epoll"
gateway_it=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "it" and m["manifest_path"].endswith("crates/gateway/Cargo.toml"):
        print(m["executable"])')
[ -x "$gateway_it" ] || { echo "no gateway integration test binary" >&2; exit 1; }
(cd crates/gateway && PMS_TEST_IO=epoll "$gateway_it") 2>&1 | tee -a "$log"

# Every suite's quick profile end to end (spawn, load, reduce, report), then each report opened in
# headless Chromium. Debug build: the figures only prove the pipeline.
phase "pms bench suite (quick profiles) and their reports in Chromium"
# `target/debug/pms` is the binary the workspace's tests built (a `cargo build` would resolve
# dependency features without the dev-dependencies and build everything again).
[ -x target/debug/pms ] || { echo "cargo test did not build target/debug/pms" >&2; exit 1; }
suites=target/suites
rm -rf "$suites"
for suite in ballerina-rest ballerina-passthrough pms-gateway async-delay pms-parking; do
  target/debug/pms bench suite "$suite" --profile quick --out "$suites/$suite"
done
(cd tests/browser && npm install --no-package-lock --no-audit --no-fund --silent)
node tests/browser/check-report.mjs "$suites"/*/report.html

# The front office in Chromium against a real `pms up`: each screen at phone and desktop size,
# axe-core, keyboard use, the session cookie; screenshots in target/front-office.
phase "the front office in Chromium"
node tests/browser/front-office.mjs target/debug/pms target/front-office

# The API contract: every OpenAPI document through openapi-spec-validator, then Schemathesis
# against a real `pms up` through the gateway, per role and per device (docs/api.md).
phase "the API contract: OpenAPI documents and Schemathesis"
bash scripts/fuzz.sh --ci target/debug/pms

# The Kubernetes chart, offline: Helm built from the Go module proxy (once; about three minutes),
# the schemas from the PyPI package kubernetes-validate; the rendered manifests against the golden
# files and the binary (docs/kubernetes.md).
phase "the Kubernetes chart"
tools="$PWD/target/tools"
mkdir -p "$tools"
[ -x "$tools/helm" ] || GOBIN="$tools" GOFLAGS=-mod=mod go install helm.sh/helm/v3/cmd/helm@v3.22.0
command -v kubernetes-validate >/dev/null || python3 -m pip install --quiet kubernetes-validate==1.37.0
python3 scripts/check-deploy.py "$tools/helm" target/debug/pms

phase ""
printf '%s%6ds  total\n' "$timings" "$SECONDS"

# One closing line for the whole workspace (cargo prints one summary per test binary, the last of
# which is usually an empty doc-test run).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
