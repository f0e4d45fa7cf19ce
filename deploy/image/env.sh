# Sourced by the image scripts (and usable by hand: `. deploy/image/env.sh`): podman and buildah
# take the project's containers.conf through CONTAINERS_CONF, and the storage driver is chosen
# here, never by editing /etc. Overlay when the kernel has it (native overlay: ext4 and xfs as
# root), else vfs in a storage folder of its own (the two cannot share one).
# SIDING_IMAGE_STORAGE=overlay|vfs forces the choice.
_image_dir=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export CONTAINERS_CONF="$_image_dir/containers.conf"
if [ -z "${SIDING_IMAGE_STORAGE:-}" ]; then
  if grep -qw overlay /proc/filesystems 2>/dev/null; then
    SIDING_IMAGE_STORAGE=overlay
  else
    SIDING_IMAGE_STORAGE=vfs
  fi
fi
export SIDING_IMAGE_STORAGE
if [ "$SIDING_IMAGE_STORAGE" = vfs ]; then
  export CONTAINERS_STORAGE_CONF="$_image_dir/storage-vfs.conf"
fi
