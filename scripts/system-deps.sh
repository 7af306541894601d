#!/usr/bin/env bash
# System packages the test suite uses, from Debian's packages; installs only what is missing.
#   redis-server: tests that kill or reconfigure Redis start their own server on a free port.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
