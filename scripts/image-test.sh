#!/usr/bin/env bash
# `make image-test`: build the Dockerfile with podman and serve one chat completion from the image.
#
#   1. The base: no image registry is reachable here, so the Dockerfile's BASE is a Debian bookworm
#      root filesystem made with debootstrap (python3, python3-venv, ca-certificates) and imported
#      as $BASE_IMAGE; made once, kept in podman's storage.
#   2. `podman build --isolation chroot --format docker` (no cgroup control needed; the docker
#      format keeps the HEALTHCHECK). The build's RUN steps see
#      this machine's CA bundle and /etc/pip.conf (read-only mounts, not stored in the image), so
#      pip reaches the package index through an intercepting proxy where there is one.
#   3. The image: its size (printed; at most $MAX_MB MB) and no torch in /opt/venv.
#   4. `podman run` needs cgroups this machine kind lacks, so the image's root filesystem is
#      mounted (`buildah from` + `buildah mount`, a writable container layer) and its
#      `sonate serve` runs in it by chroot, as the image's user (uid 10001), in /app, with the
#      image's environment, on this machine's loopback: tests/support/smoke.py writes a config
#      (the image's own plus a route to its stub provider, keys from the environment), waits for
#      /readyz, sends one chat completion and verifies the receipt.
# Needs root (debootstrap, mount, chroot). IMAGE_TEST_DIR holds the scratch files (default
# /var/tmp/sonate-image-test); REBUILD_BASE=1 makes the base again.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="${IMAGE_TEST_DIR:-/var/tmp/sonate-image-test}"
BASE_IMAGE=localhost/sonate-base:bookworm-python3.11
IMAGE=localhost/sonate-trust-proxy:image-test
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
MAX_MB=1500
PY="${SMOKE_PYTHON:-.venv/bin/python}"   # runs the check (the development virtualenv)
[ "$(id -u)" -eq 0 ] || { echo "image-test: needs root (debootstrap, mount, chroot)" >&2; exit 1; }
mkdir -p "$WORK"

if [ "${REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE_IMAGE"; then
  rootfs="$WORK/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$MIRROR"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE"
  rm -rf "$rootfs"
fi

build_mounts=()
for file in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf; do
  [ -f "$file" ] && build_mounts+=(--volume "$file:$file:ro")
done
podman build --isolation chroot --format docker --build-arg "BASE=$BASE_IMAGE" "${build_mounts[@]}" -t "$IMAGE" .

size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
mb=$((size / 1000000))
echo "image-test: image $IMAGE is $mb MB ($size bytes)"

container=$(buildah from "$IMAGE")
mnt=""
cleanup() {
  if [ -n "$mnt" ]; then
    umount "$mnt/proc" "$mnt/dev" 2>/dev/null || true
  fi
  buildah umount "$container" >/dev/null 2>&1 || true
  buildah rm "$container" >/dev/null 2>&1 || true
}
trap cleanup EXIT
mnt=$(buildah mount "$container")
torch=$(find "$mnt/opt/venv/lib" -maxdepth 3 -iname 'torch*' -print -quit)
[ -z "$torch" ] || { echo "image-test: torch is in the image: $torch" >&2; exit 1; }
[ "$mb" -le "$MAX_MB" ] || { echo "image-test: the image is over $MAX_MB MB" >&2; exit 1; }

mount --bind /proc "$mnt/proc"
mount --bind /dev "$mnt/dev"
install -d -o 10001 -g 10001 "$mnt/tmp/image-test"
env_args=()
while IFS= read -r pair; do
  [ -n "$pair" ] && env_args+=(--env "$pair")
done < <(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE")
"$PY" -m tests.support.smoke --dir "$mnt/tmp/image-test" --seen-as /tmp/image-test --policies /app/policies \
  "${env_args[@]}" -- /usr/sbin/chroot --userspec=10001:10001 "$mnt" /usr/bin/env --chdir=/app sonate serve
echo "image-test: passed; image $mb MB, no torch"
