#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need beyond the Go image, with
# apt-get, when any is missing (so a warm machine pays nothing):
#   make, git, gcc      the build
#   libseccomp-dev,     the local control plane's real node (e2e/cluster/realnode.go):
#   iptables, iproute2  runc (built with cgo) links libseccomp, iptables serves the portmap plugin
#                       and the guard that keeps the pod network on this machine,
#                       iproute2 makes its bridge
#   nftables, socat     routed Services on the real node (e2e/cluster/realnode_services.go):
#                       kube-proxy's nftables mode and its guard, the API server's forwarder
#   mmdebstrap, gpg,    the real node's images, built from Debian packages (e2e/images,
#   debian-archive-keyring   images.Packages)
set -o errexit -o nounset -o pipefail

packages=(make git gcc libseccomp-dev iptables iproute2 nftables socat mmdebstrap gpg debian-archive-keyring)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep -q "install ok installed" || missing+=("${p}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "not root: run 'sudo apt-get install -y ${missing[*]}' first" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
