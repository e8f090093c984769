#!/usr/bin/env bash
# PMS as a cluster on one machine: PostgreSQL (scripts/pg.sh), a real nats-server, two replicas
# each of users, parks and payments, and one gateway with both replicas of each as its endpoints,
# all `pms` processes on loopback. A mixed workload (reads, logins, registrations, cars in and
# out) runs through the gateway while one replica of each service in turn is killed with SIGKILL
# and started again; then the databases are checked. It is the test in
# crates/pms/tests/cluster.rs (which CI runs with a debug build and short phases), run here with
# a release build and longer phases, printing its figures:
#
#   scripts/cluster.sh                          (5 s of load around each kill)
#   PMS_CLUSTER_SECONDS=15 scripts/cluster.sh
#
# Needs Debian's postgresql and nats-server packages.
set -euo pipefail
cd "$(dirname "$0")/.."
export PMS_CLUSTER_SECONDS="${PMS_CLUSTER_SECONDS:-5}"
exec cargo test --release --locked -p pms --test cluster -- --nocapture
