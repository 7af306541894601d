#!/usr/bin/env bash
# System packages the test suite uses, from Debian's packages; installs only what is missing.
#   redis-server          tests that kill or reconfigure Redis start their own server
#   chromium + driver     the in-browser receipt verifier is tested in headless Chromium
#   prometheus            `promtool test rules` checks the recording rules
# With the argument `image`, the tools of `make image-test` instead: podman, buildah, debootstrap.
set -euo pipefail
need=()
if [ "${1:-}" = image ]; then
  for tool in podman buildah debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
else
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v chromium >/dev/null || need+=(chromium)
  command -v chromedriver >/dev/null || need+=(chromium-driver)
  command -v promtool >/dev/null || need+=(prometheus)
fi
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
