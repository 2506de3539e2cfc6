#!/bin/bash
# Build the images of the compose stack and of `make test-containers`, from the repository
# root, on a Debian bookworm base: BASE_IMAGE if set, else debian:bookworm-slim when it is on
# this machine or can be pulled, else one made here with debootstrap from the Debian mirror
# apt uses (kept as globalstore/debian:bookworm, so later runs skip that step).
# Builds use the layer cache: a second run with unchanged sources takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
KAFKA_IMAGE=${KAFKA_IMAGE:-globalstore/kafka:4.1.1}
GLOBALSTORE_IMAGE=${GLOBALSTORE_IMAGE:-globalstore/globalstore:0.1.0}
LOCAL_BASE=globalstore/debian:bookworm

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

# The first Debian archive in apt's sources (one-line or deb822 format), else Debian's own.
apt_mirror() {
    local found
    found=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -oE '^(deb|URIs:) +(\[[^]]*\] +)?https?://[^ ]+/debian/?( |$)' |
        grep -oE 'https?://[^ ]+' | head -n 1 || true)
    echo "${found:-http://deb.debian.org/debian}"
}

base_image() {
    if [ -n "${BASE_IMAGE:-}" ]; then
        echo "$BASE_IMAGE"
    elif has_image debian:bookworm-slim || docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
        echo debian:bookworm-slim
    else
        has_image "$LOCAL_BASE" || debootstrap_base >&2
        echo "$LOCAL_BASE"
    fi
}

debootstrap_base() {
    command -v debootstrap >/dev/null ||
        { echo "error: no base image can be pulled and debootstrap is missing" >&2; exit 2; }
    local mirror root
    mirror=$(apt_mirror)
    root=$(mktemp -d)
    echo "no registry answers: building $LOCAL_BASE with debootstrap from $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
        { tail -n 20 "$root.log"; rm -rf "$root"; exit 1; }
    tar -C "$root" -c . | docker import - "$LOCAL_BASE" >/dev/null
    rm -rf "$root" "$root.log"
}

build() {
    local tag=$1 dockerfile=$2 began=$SECONDS log
    log=$(mktemp)
    echo "building $tag from $dockerfile ..."
    # The classic builder: it needs no buildx plugin, and compose 1.29 builds with it too.
    if ! DOCKER_BUILDKIT=0 docker build --build-arg BASE_IMAGE="$base" \
        -f "$dockerfile" -t "$tag" . >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "error: building $tag failed (log above)" >&2
        exit 1
    fi
    rm -f "$log"
    echo "image $tag: built in $((SECONDS - began)) s"
}

# A TLS proxy's CA that this machine trusts must be trusted inside the images too.
cp /usr/local/share/ca-certificates/*.crt compose/certs/ 2>/dev/null || true
began=$SECONDS
base=$(base_image)
echo "base image: $base ($((SECONDS - began)) s)"
build "$KAFKA_IMAGE" compose/kafka/Dockerfile
build "$GLOBALSTORE_IMAGE" compose/globalstore/Dockerfile
