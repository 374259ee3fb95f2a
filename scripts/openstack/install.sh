#!/usr/bin/env bash
# Installs the Debian (bookworm, OpenStack Zed) packages the test cloud runs on:
# the python3-* library packages only (their daemon counterparts, nova-api and the like, pull in
# *-common whose postinst runs debconf, creates users and starts services), plus rabbitmq-server.
#
#   scripts/openstack/install.sh          # as root (or with sudo available)
#
# Idempotent: when every package is installed it does nothing (no apt-get update), in well under
# a second. rabbitmq-server's postinst wants to start the system broker: a policy-rc.d that
# exits 101 stops that for the duration of the install, and a broker that started anyway is stopped.
set -euo pipefail

PACKAGES=(python3-nova python3-neutron python3-keystone python3-octavia python3-placement
          python3-glance python3-barbican python3-openstackclient python3-octaviaclient rabbitmq-server)

missing=()
for p in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != installed ]]; then
        missing+=("$p")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "openstack packages already installed"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install.sh: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
fi

policy=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if [[ $created_policy -eq 1 ]]; then "${SUDO[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT
if [[ ! -e $policy ]]; then
    # invoke-rc.d asks this before starting a service; 101 = "action forbidden".
    printf '#!/bin/sh\n# temporary, from scripts/openstack/install.sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod 755 "$policy"
    created_policy=1
fi

echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q \
    --no-install-recommends "${PACKAGES[@]}"

# If the system broker got started anyway (no policy-rc.d honoured, systemd as PID 1), stop it:
# it would hold 5672/25672 and an epmd, and the test cloud runs its own broker.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl stop rabbitmq-server.service 2>/dev/null || true
    "${SUDO[@]}" systemctl disable rabbitmq-server.service 2>/dev/null || true
fi
if pgrep -u rabbitmq -f beam >/dev/null 2>&1; then
    "${SUDO[@]}" /usr/sbin/rabbitmqctl stop >/dev/null 2>&1 || true
    sleep 1
    for pid in $(pgrep -u rabbitmq -f beam || true); do "${SUDO[@]}" kill "$pid" 2>/dev/null || true; done
    for pid in $(pgrep -u rabbitmq -x epmd || true); do "${SUDO[@]}" kill "$pid" 2>/dev/null || true; done
fi

/usr/bin/python3 -c 'import nova, neutron, keystone, octavia, placement, glance, barbican, gunicorn' \
    || { echo "install.sh: the OpenStack modules do not import under /usr/bin/python3" >&2; exit 1; }
echo "openstack packages installed"
