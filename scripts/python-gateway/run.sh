#!/usr/bin/env bash
# Starts the Python example gateway in its venv; every argument goes to gateway.py
# (e.g. --listen 127.0.0.1:50061 --admin-listen 127.0.0.1:10261). The process replaces this
# script, so its PID is the gateway's and a signal to it reaches the gateway.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PYTHON_GATEWAY_VENV:-$repo_root/.venv-python-gateway}"
if [[ ! -x "$venv/bin/python" || ! -d "$venv/generated/cloudgateway" ]]; then
    echo "the Python gateway is not set up in $venv: run scripts/python-gateway/setup.sh (make test-deps)" >&2
    exit 69
fi
exec "$venv/bin/python" "$repo_root/examples/python-gateway/gateway.py" "$@"
