#!/usr/bin/env bash
# install-deps.sh installs the host tools the e2e cluster needs (Debian/Ubuntu, as root), only those missing:
# ip (iproute2), iptables, nft (nftables), conntrack, curl, and chromium (the landing page's headless browser
# test). Idempotent.
set -euo pipefail
declare -A pkg=([ip]=iproute2 [iptables]=iptables [nft]=nftables [conntrack]=conntrack [curl]=curl [chromium]=chromium)
missing=()
for cmd in "${!pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: missing ${missing[*]}; run as root" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
