#!/usr/bin/env bash
# Installs moto_server (the AWS API peer of the provider-aws tests) into a project-local venv.
#
#   scripts/moto/setup.sh            # venv at $MOTO_VENV, default <repo>/.venv-moto
#
# Idempotent: a venv that already has the pinned moto is left alone (well under a second).
# The tests find the server at $MOTO_SERVER, else at <venv>/bin/moto_server.
set -euo pipefail

# 5.0.28: answers DuplicateLoadBalancerName like AWS (5.2.x creates a second LB) and is 2-3x faster.
MOTO_VERSION="5.0.28"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${MOTO_VENV:-$repo_root/.venv-moto}"
python="${PYTHON:-python3}"

installed_version() {
    "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null || true
}

if [[ -x "$venv/bin/moto_server" && "$(installed_version)" == "$MOTO_VERSION" ]]; then
    echo "moto $MOTO_VERSION already installed in $venv"
else
    echo "installing moto[server]==$MOTO_VERSION into $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
    "$venv/bin/moto_server" --help >/dev/null
fi
# moto's own faults that the tests meet (see the script).
"$venv/bin/python" "$repo_root/scripts/moto/patch_moto.py"
echo "moto_server: $venv/bin/moto_server"
