#!/usr/bin/env bash
# Runs the whole test suite on binaries already built by `make build`.
# cargo-nextest is preferred (parallel per test, one shared build); plain cargo test otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
# kubectl from scripts/tools/setup.sh, for the tests that drive the real kubectl.
if [[ -z "${KUBECTL:-}" && -x .tools/kubectl ]]; then
  export KUBECTL="$PWD/.tools/kubectl"
fi
if cargo nextest --version >/dev/null 2>&1; then
  exec cargo nextest run --workspace --no-fail-fast "$@"
else
  echo "cargo-nextest not found; using cargo test" >&2
  exec cargo test --workspace --no-fail-fast "$@"
fi
