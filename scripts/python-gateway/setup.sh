#!/usr/bin/env bash
# Sets up the Python example gateway (examples/python-gateway): a project-local venv with its
# pinned dependencies from PyPI, and its gRPC code generated from proto/cloudgateway/v1/*.proto
# (generated code is never committed: it lives in the venv, on the venv's import path).
#
#   scripts/python-gateway/setup.sh      # venv at $PYTHON_GATEWAY_VENV, default <repo>/.venv-python-gateway
#
# Idempotent: packages are installed again only when requirements.txt changes, code is generated
# again only when a .proto changes; a second run takes well under a second.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PYTHON_GATEWAY_VENV:-$repo_root/.venv-python-gateway}"
python="${PYTHON:-python3}"
requirements="$repo_root/examples/python-gateway/requirements.txt"
generated="$venv/generated"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating $venv"
    "$python" -m venv "$venv"
fi
# Not part of the repository, whatever the top-level .gitignore says.
echo '*' >"$venv/.gitignore"

if ! cmp -s "$requirements" "$venv/requirements.installed"; then
    echo "installing $(grep -cv '^#' "$requirements") packages from PyPI into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.installed"
fi

protos=("$repo_root"/proto/cloudgateway/v1/*.proto)
digest="$(cat "${protos[@]}" | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$generated/.proto-sha256" 2>/dev/null)" != "$digest" ]]; then
    echo "generating the cloudgateway.v1 code into $generated"
    rm -rf "$generated"
    mkdir -p "$generated"
    (cd "$repo_root/proto" && "$venv/bin/python" -m grpc_tools.protoc -I. \
        --python_out="$generated" --grpc_python_out="$generated" cloudgateway/v1/*.proto)
    touch "$generated/cloudgateway/__init__.py" "$generated/cloudgateway/v1/__init__.py"
    echo "$digest" >"$generated/.proto-sha256"
fi
# The generated package on the venv's import path.
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$generated" >"$site/cloudgateway-generated.pth"

"$venv/bin/python" -c 'import grpc, yaml, grpc_status; from cloudgateway.v1 import gateway_pb2_grpc'
echo "python gateway: scripts/python-gateway/run.sh --listen 127.0.0.1:50061 (see examples/python-gateway/README.md)"
