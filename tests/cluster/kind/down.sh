#!/usr/bin/env bash
# Removes what up.sh made: the kind cluster (node containers and their
# volumes), the nodes' Docker network, the policy-routing rule, kind's dockerd
# (only the PID up.sh started), and .cluster-kind/ (its logs stay).
# Cached images and binaries stay in $KDIST_CACHE; `down.sh --purge` also
# removes the kind cache ($KDIST_CACHE/kind: Docker's data root, the base
# rootfs, the kubeadm/kube-proxy build module).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_TAG=kind-down

purge=0
case ${1:-} in
  "") ;;
  --purge) purge=1 ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

remove_cluster() {
  dockerd_up || return 0
  delete_kind_cluster
  # Anything else left of ours (a build container).
  local c
  for c in $(docker_ ps -aq --filter "name=^kdist-kind-build-"); do
    docker_ rm -f -v "$c" >/dev/null 2>&1 || true
  done
  if docker_ network inspect "$NODE_NET_NAME" >/dev/null 2>&1; then
    log "removing Docker network $NODE_NET_NAME"
    docker_ network rm "$NODE_NET_NAME" >/dev/null
  fi
}

remove_isolation_rule() {
  while [[ -n $(ip rule show pref "$ISOLATION_PRIORITY") ]]; do
    ip rule del pref "$ISOLATION_PRIORITY"
  done
  ip route flush table "$ISOLATION_TABLE" 2>/dev/null || true
}

# dockerd's exec root holds network-namespace and shm mounts; a dockerd
# killed hard leaves them behind.
unmount_state() {
  local m
  for m in $(awk -v s="$STATE/" '{ if (index($5, s) == 1) print $5 }' /proc/self/mountinfo | sort -r -u); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

main() {
  require_root
  [[ -d $STATE ]] || { log "no kind cluster state in $STATE: nothing to do"; }
  if [[ -d $STATE ]]; then
    take_lock
    remove_cluster
    stop_daemon dockerd 30
    remove_isolation_rule
    unmount_state
    # Everything but the logs (and the lock this script holds).
    find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs ! -name .lock -exec rm -rf {} +
  fi
  if ((purge)); then
    log "removing the kind cache $KIND_CACHE"
    rm -rf "$KIND_CACHE"
  fi
  log "done"
}

main "$@"
