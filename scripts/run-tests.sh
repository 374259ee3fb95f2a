#!/usr/bin/env bash
# Runs the whole test suite on binaries already built by `make build`.
# cargo-nextest is preferred (parallel per test, one shared build); plain cargo test otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
# kubectl from scripts/tools/setup.sh, for the tests that drive the real kubectl.
if [[ -z "${KUBECTL:-}" && -x .tools/kubectl ]]; then
  export KUBECTL="$PWD/.tools/kubectl"
fi
# The OpenStack test cloud (scripts/openstack), shared by every OpenStack test of the run: started
# in the background under the lock the tests' fixture takes (crates/testing/openstack-fixture), so
# the other tests run meanwhile and the OpenStack ones wait for it; stopped at the end when this
# script started it (a cloud already running there, e.g. a developer's, is left alone).
export OPENSTACK_TEST_CLOUD="${OPENSTACK_TEST_CLOUD:-$PWD/target/openstack-test}"
started_cloud=
if ! scripts/openstack/testcloud status "$OPENSTACK_TEST_CLOUD" >/dev/null 2>&1; then
  mkdir -p "$(dirname "$OPENSTACK_TEST_CLOUD")"
  flock "$OPENSTACK_TEST_CLOUD.lock" scripts/openstack/testcloud up "$OPENSTACK_TEST_CLOUD" \
    > "$OPENSTACK_TEST_CLOUD.up.log" 2>&1 &
  started_cloud=1
fi
stop_cloud() {
  if [[ -n "$started_cloud" ]]; then
    wait || true
    echo "OpenStack test cloud: $(grep -o '"started_s": [0-9.]*' "$OPENSTACK_TEST_CLOUD/cloud.json" 2>/dev/null), $(grep -o '"pss_mib": [0-9.]*' "$OPENSTACK_TEST_CLOUD/cloud.json" 2>/dev/null)" >&2
    scripts/openstack/testcloud down "$OPENSTACK_TEST_CLOUD" >/dev/null 2>&1 || true
  fi
}
trap stop_cloud EXIT
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  echo "cargo-nextest not found; using cargo test" >&2
  cargo test --workspace --no-fail-fast "$@"
fi
