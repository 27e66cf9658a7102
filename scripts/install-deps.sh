#!/usr/bin/env bash
# install-deps.sh installs the host packages the tests use, only those missing (Debian, as root). Idempotent.
#   iptables (iptables-legacy-* and iptables-nft-*), nftables (nft), iproute2 (ip netns), conntrack, curl.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
declare -A pkg=([ip]=iproute2 [iptables-legacy-save]=iptables [iptables-nft-save]=iptables [nft]=nftables
	[conntrack]=conntrack [curl]=curl [git]=git)
missing=()
for cmd in "${!pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
done
if ((${#missing[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "install-deps: missing packages ${missing[*]}; run as root (or install them)" >&2
	exit 1
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
