#!/bin/sh
# PID 1 of a rehearsal pod, inside the pod's own network, mount, UTS and PID namespaces
# (tests/rehearsal/cluster.py): builds the pod's root file system on a tmpfs, waits until the
# harness has plugged the pod's eth0 in (it then creates READY), then execs the container command
# in that root, so the command stays PID 1.
# Usage: pod_root.sh ROOT HOSTNAME READY {bind SOURCE TARGET ro|rw | tmpfs - TARGET rw}... -- COMMAND...
set -eu
root=$1
name=$2
ready=$3
shift 3
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
while [ "$1" != -- ]; do
  kind=$1
  source=$2
  target=$3
  mode=$4
  shift 4
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
    bind) mount --bind "$source" "$root$target" ;;
    tmpfs) mount -t tmpfs -o mode=1777 pod-tmpfs "$root$target"; made="$made $target" ;;
    *) echo "pod_root: unknown mount kind $kind" >&2; exit 1 ;;
  esac
  if [ "$mode" = ro ]; then
    mount -o remount,bind,ro "$root$target"
  fi
done
shift
# As under the kubelet, the container starts once the CNI has set up the pod's network.
tries=0
until [ -e "$ready" ]; do
  tries=$((tries + 1))
  if [ "$tries" -gt 600 ]; then echo "pod_root: no network after 30 s" >&2; exit 1; fi
  sleep 0.05
done
exec chroot "$root" "$@"
