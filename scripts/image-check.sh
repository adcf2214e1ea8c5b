#!/usr/bin/env bash
# scripts/image-check.sh (make image-check): builds the kvgate image with
# `make image` and proves it works: `kvgate version` in the container, then
# `kvgate serve` (the image's default command, the embedded simulated engines)
# with its ports published, checked from outside by TestImageServes (gRPC
# health, ListWorkers, a Generate, /metrics). Prints the image's size.
#
# Podman comes from Debian, pinned, installed when missing (as root). Podman
# runs rootful with the vfs storage driver and chroot build isolation, which
# need neither overlayfs nor user namespaces. Where the machine still cannot
# run containers for a reason of its own (no namespaces, no usable cgroups,
# no right to set limits), the script says "SKIPPED: <reason>" and exits 0;
# an image that fails to build or a container that misbehaves fails it.
set -euo pipefail
cd "$(dirname "$0")/.."

PODMAN_VERSION=4.3.1+ds1-8+deb12u1+b3
# crun (podman's default runtime) refuses hosts with hybrid cgroups (v1
# controllers beside a v2 mount); runc runs there.
RUNC_VERSION=1.1.5+ds1-1+deb12u1
IMAGE=localhost/kvgate
NAME=kvgate-image-check-$$

skip() {
	echo "SKIPPED: $*"
	exit 0
}

# An error podman reports for the environment rather than for the image.
env_reason() {
	grep -Eo 'cannot clone: [^"]*|setrlimit [^:]*: Operation not permitted|Operation not permitted|OCI permission denied|cgroups in hybrid mode not supported|user namespaces? [^"]*|newuidmap[^"]*|cannot mount [^"]*|overlay[^"]* not supported|kernel does not support[^"]*|unshare[^"]*' <<<"$1" | head -n 1
}

apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		return 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

if ! command -v podman >/dev/null; then
	apt_install "podman=$PODMAN_VERSION" || skip "podman is not installed and cannot be installed here (needs root and apt)"
fi
podman --version

podman_flags=(--storage-driver vfs --cgroup-manager cgroupfs)
if [ -e /sys/fs/cgroup/unified ] && ! [ -e /sys/fs/cgroup/cgroup.controllers ]; then
	if ! command -v runc >/dev/null; then
		apt_install "runc=$RUNC_VERSION" || skip "hybrid cgroups, which crun refuses, and runc cannot be installed"
	fi
	podman_flags+=(--runtime runc)
fi
# Limits a container starts with: podman's default raises RLIMIT_NOFILE and
# RLIMIT_NPROC, which needs CAP_SYS_RESOURCE; these stay within this shell's.
nofile=$(ulimit -Sn)
nproc=4096
if [ "$(ulimit -Su)" != unlimited ] && [ "$(ulimit -Su)" -lt "$nproc" ]; then
	nproc=$(ulimit -Su)
fi
run_flags=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")

# The build: a failure is ours unless podman names the environment.
tag=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
if ! make image IMAGE="$IMAGE" IMAGE_VERSION="$tag" PODMAN_FLAGS="${podman_flags[*]}" PODMAN_BUILD_FLAGS="--isolation chroot" 2>&1 | tee "$build_log"; then
	reason=$(env_reason "$(cat "$build_log")")
	[ -n "$reason" ] && skip "podman cannot build here: $reason"
	echo "FAIL: make image"
	exit 1
fi

# kvgate version in the container: it must name the commit the image was built from.
if ! out=$(podman "${podman_flags[@]}" run --rm "${run_flags[@]}" "$IMAGE:$tag" version 2>&1); then
	echo "$out"
	reason=$(env_reason "$out")
	[ -n "$reason" ] && skip "podman cannot run containers here: $reason"
	echo "FAIL: kvgate version in the container"
	exit 1
fi
echo "in the container: $out"
commit=$(git rev-parse HEAD)
case "$out" in
"kvgate "*"(commit $commit"*) ;;
*)
	echo "FAIL: the image's kvgate does not name commit $commit"
	exit 1
	;;
esac

# kvgate serve, the image's default command, with its ports published on
# free loopback ports podman picks.
cleanup() {
	podman "${podman_flags[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
	rm -f "$build_log"
}
trap cleanup EXIT
if ! out=$(podman "${podman_flags[@]}" run -d --name "$NAME" "${run_flags[@]}" \
	-p 127.0.0.1::30000 -p 127.0.0.1::29000 "$IMAGE:$tag" 2>&1); then
	echo "$out"
	reason=$(env_reason "$out")
	[ -z "$reason" ] && reason=$(grep -Eo 'netavark[^"]*|slirp4netns[^"]*|iptables[^"]*|CNI[^"]*' <<<"$out" | head -n 1)
	[ -n "$reason" ] && skip "kvgate version ran in the container, but it cannot get a network here: $reason"
	echo "FAIL: podman run serve"
	exit 1
fi
grpc=$(podman "${podman_flags[@]}" port "$NAME" 30000/tcp)
metrics=$(podman "${podman_flags[@]}" port "$NAME" 29000/tcp)
echo "kvgate serve in the container: gRPC on $grpc, metrics on $metrics"
if ! KVGATE_IMAGE_GRPC=$grpc KVGATE_IMAGE_METRICS=$metrics go test -count=1 -run '^TestImageServes$' -v ./cmd/kvgate; then
	podman "${podman_flags[@]}" logs "$NAME" 2>&1 | tail -n 30
	echo "FAIL: kvgate serve in the container"
	exit 1
fi

size=$(podman "${podman_flags[@]}" image inspect --format '{{.Size}}' "$IMAGE:$tag")
echo "image $IMAGE:$tag: $size bytes ($(awk -v b="$size" 'BEGIN { printf "%.1f MB", b / 1e6 }'))"
echo "image-check: ok"
