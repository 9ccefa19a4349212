#!/usr/bin/env bash
# Stops the test cluster this checkout started (only the PIDs in
# .cluster/run), removes its pods and their network namespaces, unmounts what
# is mounted under .cluster, deletes the bridge and the cluster's state.
# Logs stay in .cluster/logs; caches (binaries, images) stay in $KDIST_CACHE.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CLUSTER_SRC/kueue.sh"
source "$CLUSTER_SRC/jobset.sh"
source "$CLUSTER_SRC/trainer.sh"
LOG_TAG=down
CRICTL=$BIN/crictl-$CRICTL_VERSION

# Stop and remove every pod sandbox through CRI while containerd runs, so the
# CNI plugin releases addresses and containerd removes the pods' netns.
remove_pods() {
  daemon_alive containerd || return 0
  local cri=("$CRICTL" --runtime-endpoint "unix://$CTR_SOCK" --timeout 30s)
  if [[ -x $CRICTL ]]; then
    local n; n=$("${cri[@]}" pods -q 2>/dev/null | wc -l)
    ((n == 0)) || { log "removing $n pod sandbox(es)"; "${cri[@]}" rmp -fa >/dev/null 2>&1 || true; }
  fi
  # Anything CRI did not own (or could not remove): kill and delete directly.
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s KILL "$id" >/dev/null 2>&1 || true
  done
  for id in $(ctr_ containers ls -q 2>/dev/null); do
    netns_of "$id" >> "$RUN/netns.leftover" || true
    ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true
    ctr_ containers delete "$id" >/dev/null 2>&1 || true
  done
}

netns_of() {  # the network namespace path a container was started in
  ctr_ containers info "$1" 2>/dev/null | python3 -c '
import json, sys
spec = json.load(sys.stdin).get("Spec") or {}
for ns in (spec.get("linux") or {}).get("namespaces") or []:
    if ns.get("type") == "network" and ns.get("path"):
        print(ns["path"])'
}

remove_leftover_netns() {
  [[ -f $RUN/netns.leftover ]] || return 0
  local path
  for path in $(sort -u "$RUN/netns.leftover"); do
    [[ $path == /var/run/netns/* || $path == /run/netns/* ]] || continue
    [[ -e $path ]] || continue
    log "deleting network namespace $path"
    umount "$path" 2>/dev/null || true
    rm -f "$path"
  done
}

# Unmount everything under our state and image dirs, deepest first.
unmount_all() {
  local m
  for m in $(awk -v s="$STATE/" -v r="$CTR_ROOT/" \
               '{ if (index($5, s) == 1 || $5 == substr(s, 1, length(s) - 1) || index($5, r) == 1) print $5 }' \
               /proc/self/mountinfo | sort -r -u); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
}

main() {
  require_root
  [[ -d $STATE ]] || { log "no cluster state in $STATE: nothing to do"; return 0; }
  take_lock
  stop_daemon kwok  # the scale tests' fake nodes (kwok.sh), if a test left it running
  stop_kueue
  stop_trainer
  stop_jobset
  stop_daemon training-operator
  stop_daemon coredns
  stop_daemon kubelet
  remove_pods
  stop_daemon containerd 30
  stop_daemon kube-scheduler
  stop_daemon kube-controller-manager
  stop_daemon kube-apiserver
  stop_daemon etcd
  stop_daemon dockerd 30
  remove_leftover_netns
  unmount_all
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "deleting bridge $BRIDGE"
    ip link delete "$BRIDGE"
  fi
  ip route del unreachable "$SVC_NET" 2>/dev/null || true
  ip route del unreachable "$POD_NET" 2>/dev/null || true
  if grep -q " $STATE/" /proc/self/mountinfo; then
    die "mounts remain under $STATE; not removing it"
  fi
  find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf --one-file-system {} +
  rm -rf "$WEBHOOK_CERT_DIR"
  if [[ -f $OWNER_FILE && $(<"$OWNER_FILE") == "$STATE" ]]; then rm -f "$OWNER_FILE"; fi
  log "cluster down (logs kept in $LOGS)"
}

main "$@"
