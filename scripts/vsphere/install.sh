#!/usr/bin/env bash
# Installs what vcsim (govmomi's vSphere simulator) is built from: Debian's Go toolchain and
# govmomi's library sources (golang-github-vmware-govmomi-dev ships the `simulator` package, not
# the `vcsim` binary, so scripts/vsphere/vcsim builds a small main of our own from it).
#
#   scripts/vsphere/install.sh          # as root (or with sudo available)
#
# Idempotent: when both packages are installed it does nothing (no apt-get update).
set -euo pipefail

PACKAGES=(golang-go golang-github-vmware-govmomi-dev)

missing=()
for p in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
        missing+=("$p")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "vcsim build packages already installed"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install.sh: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
fi

echo "installing ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q \
    --no-install-recommends "${PACKAGES[@]}"
