#!/bin/bash
# The image's base: a Debian root made by debootstrap from the mirror this machine's apt uses,
# with Debian's Python 3.11, a headless Java 17 runtime and tini, imported into podman's storage
# as localhost/siding-base:KEY. Prints that name on stdout (all else goes to stderr).
#
# KEY is a digest of what the base is made from: the suite, the mirror, the architecture, the
# package list and this script. The root is kept as a tar in the cache folder
# (${SIDING_IMAGE_CACHE:-$XDG_CACHE_HOME/siding/image}, outside the checkout), so a machine
# whose podman storage was emptied imports it again instead of running debootstrap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"

suite=bookworm
# debootstrap follows Depends only (never Recommends): nothing more than these and their needs.
# (It resolves no virtual package: python3-distutils gives python3.11-venv its python3.11-distutils.)
packages="python3.11 python3.11-venv python3-distutils python3-pip-whl python3-setuptools-whl
  openjdk-17-jre-headless ca-certificates tini"
packages=$(echo $packages)
mirror=$("$here/mirror.sh" "$suite")
# Security updates, when this machine's apt has them: the base gets them at build time.
security=$("$here/mirror.sh" "$suite-security" 2>/dev/null || true)
arch=$(dpkg --print-architecture)
cache=${SIDING_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/siding/image}
key=$(printf '%s\n' "$suite" "$mirror" "$security" "$arch" "$packages" | cat - "$here/base.sh" |
  sha256sum | cut -c1-16)
name="localhost/siding-base:$key"

if podman image exists "$name"; then
  echo "base: $name (in podman's storage)" >&2
  echo "$name"
  exit 0
fi
mkdir -p "$cache"
tarball="$cache/base-$key.tar"
if [ ! -f "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "error: debootstrap not found: run make image-tools" >&2; exit 1; }
  echo "base: debootstrap $suite from $mirror ($packages)" >&2
  root=$(mktemp -d "$cache/root.XXXXXX")
  # debootstrap mounts /proc and /sys in the root while it works: never delete through them.
  trap 'umount -R "$root/proc" "$root/sys" 2>/dev/null || true; rm -rf --one-file-system "$root" "$tarball.part"' EXIT
  debootstrap --variant=minbase --arch="$arch" --include="${packages// /,}" \
    "$suite" "$root" "$mirror" >&2
  # The point release's packages, then bookworm-updates' and bookworm-security's.
  {
    echo "deb $mirror $suite main"
    echo "deb $mirror $suite-updates main"
    if [ -n "$security" ]; then echo "deb $security $suite-security main"; fi
  } > "$root/etc/apt/sources.list"
  mount -t proc proc "$root/proc"
  chroot "$root" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -y -qq --no-install-recommends \
    -o Dpkg::Use-Pty=0 dist-upgrade >&2
  umount "$root/proc"
  # Small: no package lists, caches, logs, manuals or docs (the copyright files stay).
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/log/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/tmp/*
  find "$root/usr/share/doc" -type f ! -name copyright -delete
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
  tar --numeric-owner --xattrs -C "$root" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  # One base at a time: an older key's tar is of no more use.
  find "$cache" -maxdepth 1 -name 'base-*.tar' ! -name "base-$key.tar" -delete
else
  echo "base: $tarball (cached)" >&2
fi
podman import --quiet --message "debootstrap $suite $mirror: $packages" \
  --change 'ENV LANG=C.UTF-8' "$tarball" "$name" >&2
echo "$name"
