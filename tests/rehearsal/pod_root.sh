#!/bin/sh
# PID 1 of a rehearsal pod, inside the pod's own network, mount, UTS and PID namespaces
# (tests/rehearsal/cluster.py): builds the pod's root file system on a tmpfs, waits until the
# harness has plugged the pod's eth0 in (it then creates READY), then execs the container command
# in that root, so the command stays PID 1.
# Usage: pod_root.sh ROOT HOSTNAME READY ROOTFS
#          {private - TARGET - | image SOURCE TARGET ro}...
#          {bind SOURCE TARGET ro|rw | tmpfs - TARGET ro|rw}... -- COMMAND...
# ROOTFS is ro for a container with readOnlyRootFilesystem: then the image (the root, this
# machine's folders, the private and image entries) is read-only and only the volumes (the
# bind and tmpfs entries) keep their own mode. A private entry shows an empty folder at TARGET
# instead of this machine's (see cluster.py, Cluster._image); image entries bind SOURCE there.
set -eu
root=$1
name=$2
ready=$3
rootfs=$4
shift 4
# A container's processes start with the runtime's umask (runc: 0022), whatever the harness has;
# folders made below for mount points get the modes an image's folders have.
umask 022
mount -t tmpfs -o mode=0755 pod-root "$root"
# The image: every top-level folder of this machine, bound as it is (mounts below it included).
for path in /*; do
  entry=${path#/}
  if [ -L "$path" ]; then
    ln -s "$(readlink "$path")" "$root/$entry"
  elif [ -d "$path" ] && [ "$entry" != proc ]; then
    mkdir "$root/$entry"
    mount --rbind "$path" "$root/$entry"
  fi
done
mkdir "$root/proc"
# The pod's own PID namespace where the kernel allows a new proc mount, else this machine's.
mount -t proc proc "$root/proc" 2>/dev/null || mount --rbind /proc "$root/proc"
hostname "$name"
# Folders the pod made itself (on its root's tmpfs or a tmpfs mounted here): missing folders
# below them are made too (a ServiceAccount's secrets below /run, a hostPath at /host/sys).
made=""
under_made() {
  for folder in $made; do
    case $1 in "$folder"/*) return 0 ;; esac
  done
  return 1
}
# Every mount of the image read-only but the root's own tmpfs, which takes the volumes' new
# mount points first (the runtime too makes the root read-only last). /dev, /proc and /sys are
# the runtime's mounts in a container, not the image's: they keep their modes. A bind remount
# changes the flags of that one mount in this mount namespace: this machine's mounts stay as
# they are.
seal_image() {
  findmnt -R -rn -o TARGET "$root" | while read -r target; do
    case $target in
      "$root" | "$root"/dev | "$root"/dev/* | "$root"/proc | "$root"/proc/* | "$root"/sys | "$root"/sys/*) ;;
      *\\*) echo "pod_root: $target: a mount point with an escaped name cannot be made read-only" >&2; exit 1 ;;
      *) mount -o remount,bind,ro "$target" ;;
    esac
  done
}
# The mount points of the entries to come that lie below folders made here (a volume below an
# image folder shown empty), made before the seal makes those folders read-only.
premake() {
  while [ "$1" != -- ]; do
    if [ ! -e "$root$3" ] && under_made "$3"; then mkdir -p "$root$3"; fi
    shift 4
  done
}
sealed=no
while [ "$1" != -- ]; do
  kind=$1
  source=$2
  target=$3
  mode=$4
  shift 4
  case $kind in
    private | image) ;;
    *)
      if [ "$sealed" = no ] && [ "$rootfs" = ro ]; then
        premake "$kind" "$source" "$target" "$mode" "$@"
        seal_image
      fi
      sealed=yes
      ;;
  esac
  if [ ! -e "$root$target" ]; then
    rest=${target#/}
    top=/${rest%%/*}
    if under_made "$target"; then
      mkdir -p "$root$target"
    elif [ ! -e "$root$top" ]; then
      mkdir -p "$root$target"
      made="$made $top"
    else
      # A missing folder below a bound one would be made on this machine's file system.
      echo "pod_root: $target does not exist in the image" >&2; exit 1
    fi
  fi
  case $kind in
    private)
      # Not over this machine's folder (a mount left below, out of sight but in the pod's
      # mount table): that folder's mounts go, the empty folder takes their place.
      if mountpoint -q "$root$target"; then umount -l "$root$target"; fi
      mount -t tmpfs -o mode=0755 pod-image "$root$target"
      made="$made $target"
      ;;
    bind | image) mount --bind "$source" "$root$target" ;;
    tmpfs) mount -t tmpfs -o mode=1777 pod-tmpfs "$root$target"; made="$made $target" ;;
    *) echo "pod_root: unknown mount kind $kind" >&2; exit 1 ;;
  esac
  if [ "$mode" = ro ]; then
    mount -o remount,bind,ro "$root$target"
  fi
done
shift
if [ "$rootfs" = ro ]; then
  if [ "$sealed" = no ]; then seal_image; fi
  mount -o remount,bind,ro "$root"
fi
# As under the kubelet, the container starts once the CNI has set up the pod's network.
tries=0
until [ -e "$ready" ]; do
  tries=$((tries + 1))
  if [ "$tries" -gt 600 ]; then echo "pod_root: no network after 30 s" >&2; exit 1; fi
  sleep 0.05
done
exec chroot "$root" "$@"
