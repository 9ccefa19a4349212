# Shared settings and helpers of the kdist test-cluster scripts (sourced,
# never run). Every path, address and name the harness uses is defined here.
set -euo pipefail

CLUSTER_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$CLUSTER_SRC/../.." && pwd)
# shellcheck source=versions.env
source "$CLUSTER_SRC/versions.env"

# Caches outlive a checkout (CI clones afresh on the same machine): binaries,
# Go modules, wheels, the base rootfs, Docker's and containerd's image stores.
CACHE=${KDIST_CACHE:-$HOME/.cache/kdist}
BIN=$CACHE/bin
K8S_BIN=$BIN/kubernetes-$K8S_VERSION
KUBECTL=$K8S_BIN/kubectl
# State of one running cluster: git-ignored, removed by down.sh (logs kept).
STATE=$REPO/.cluster
LOGS=$STATE/logs
RUN=$STATE/run
PKI=$STATE/pki
ETC=$STATE/etc
ADMIN_KUBECONFIG=$STATE/kubeconfig
# One cluster per machine: its ports and bridge are global. This file names
# the state directory of the checkout whose cluster is running.
OWNER_FILE=/run/kdist-cluster.owner

NODE_NAME=kdist-node
BRIDGE=kbr0
BRIDGE_MAC=02:6b:64:69:73:01  # locally administered ("kdis" 01)
HOST_IP=10.244.0.1         # the bridge's address: apiserver, kubelet, CoreDNS
POD_SUBNET=10.244.0.0/24   # this node's pods
POD_NET=10.244.0.0/16
SVC_NET=10.96.0.0/16
API_SVC_IP=10.96.0.1
API_URL=https://$HOST_IP:6443

CTR_SOCK=$RUN/containerd.sock
CTR_ROOT=$CACHE/containerd          # image store, kept across clusters
CTR_STATE=$STATE/containerd
DOCKER_SOCK=$RUN/docker.sock
DOCKER_ROOT=$CACHE/docker           # Docker images and build cache
WEBHOOK_CERT_DIR=/tmp/k8s-webhook-server/serving-certs  # fixed in the operator

INITWAIT_SRC=$CLUSTER_SRC/initwait/main.go

log() { printf '[%s %s] %s\n' "${LOG_TAG:-cluster}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

ctr_() { ctr --address "$CTR_SOCK" --namespace k8s.io "$@"; }
kubectl_() { "$KUBECTL" --kubeconfig "$ETC/admin.kubeconfig" "$@"; }

require_root() { [[ $(id -u) == 0 ]] || die "must run as root (it creates a bridge, mounts and cgroups)"; }

# Debian packages the harness runs; installed once, quietly, when missing.
# The only place any script installs a package. CI starts the kind stage and
# the single-node cluster together, so two of these may run at once: they take
# turns on one lock (and re-check inside it), and apt-get itself waits for
# dpkg's lock held by anything else rather than failing "Could not get lock".
KDIST_APT_LOCK=${KDIST_APT_LOCK:-/var/lock/kdist-apt.lock}
missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || printf '%s\n' "$p"
  done
}
ensure_packages() {
  local missing=()
  mapfile -t missing < <(missing_packages "$@")
  ((${#missing[@]})) || return 0
  mkdir -p "$LOGS" "$(dirname "$KDIST_APT_LOCK")"
  local fd
  exec {fd}>"$KDIST_APT_LOCK"
  flock -w 1800 "$fd" || die "waited 30 min for $KDIST_APT_LOCK (another package install of kdist's scripts)"
  mapfile -t missing < <(missing_packages "$@")
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (log: $LOGS/apt.log)"
    # No init system here: keep maintainer scripts from starting daemons.
    local policy=/usr/sbin/policy-rc.d created=0
    [[ -e $policy ]] || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; created=1; }
    local apt=(apt-get -o DPkg::Lock::Timeout=900 -y --no-install-recommends)
    {
      DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "${missing[@]}" ||
        { "${apt[@]}" update && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install "${missing[@]}"; }
    } >>"$LOGS/apt.log" 2>&1 || { ((created)) && rm -f "$policy"; exec {fd}>&-; die "apt-get install ${missing[*]} failed; see $LOGS/apt.log"; }
    ((created)) && rm -f "$policy"
  fi
  exec {fd}>&-
  return 0
}

# put FILE < CONTENT: replace FILE atomically, and only when CONTENT differs
# (containerd watches the CNI directory; a half-written file there would
# fail pods being created at that moment).
put() {
  local file=$1 tmp
  tmp=$(mktemp "$(dirname "$file")/.put.XXXXXX")
  cat > "$tmp"
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv "$tmp" "$file"; fi
}

# --- processes --------------------------------------------------------------
# Each daemon NAME has $RUN/NAME.pid and $RUN/NAME.exe (its binary), and logs
# to $LOGS/NAME.log. A PID only counts as ours while it still runs that binary.

daemon_pid() {  # daemon_pid NAME -> prints the PID if NAME runs, else fails
  local name=$1 pid exe
  [[ -f $RUN/$name.pid && -f $RUN/$name.exe ]] || return 1
  pid=$(<"$RUN/$name.pid"); exe=$(<"$RUN/$name.exe")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$(readlink -f "$exe")" ]] || return 1
  printf '%s\n' "$pid"
}

daemon_alive() { daemon_pid "$1" >/dev/null; }

start_daemon() {  # start_daemon NAME BINARY ARGS...
  local name=$1 exe=$2; shift 2
  mkdir -p "$RUN" "$LOGS"
  printf '%s\n' "$exe" > "$RUN/$name.exe"
  printf '\n===== %s starting %s\n' "$(date -Is)" "$name" >> "$LOGS/$name.log"
  # The inner shell writes its own PID, then becomes the daemon: the PID file
  # is right whether or not setsid had to fork. setsid detaches it from the
  # caller's session so it outlives `make`.
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$RUN/$name.pid" "$exe" "$@" \
    </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  local i
  for i in $(seq 50); do daemon_alive "$name" && return 0; sleep 0.1; done
  log_tail "$name"; die "$name did not start"
}

# A zombie has exited: PID 1 here may take a while to reap it.
pid_running() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [[ $st != Z ]]; }

stop_daemon() {  # stop_daemon NAME [GRACE_SECONDS]: TERM, then KILL
  local name=$1 grace=${2:-15} pid i
  if pid=$(daemon_pid "$name"); then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq $((grace * 10))); do pid_running "$pid" || break; sleep 0.1; done
    if pid_running "$pid"; then
      log "$name ignored TERM for ${grace}s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 50); do pid_running "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$RUN/$name.pid" "$RUN/$name.exe"
}

log_tail() { [[ -f $LOGS/$1.log ]] && { echo "--- last lines of $LOGS/$1.log" >&2; tail -n "${2:-25}" "$LOGS/$1.log" >&2; }; return 0; }

# One up.sh / image.sh / down.sh at a time per checkout: holds fd 9 until
# the script exits (start_daemon closes it for the daemons).
take_lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  flock -w 900 9 || die "another harness script held $STATE/.lock for 15 minutes"
}

# wait_for DESCRIPTION TIMEOUT_S LOGNAME CMD...: run CMD until it succeeds;
# after TIMEOUT_S fail with the tail of LOGNAME's log.
wait_for() {
  local what=$1 timeout=$2 logname=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log_tail "$logname" 40
      die "timed out after ${timeout}s waiting for $what"
    fi
    if [[ -n $logname ]] && ! daemon_alive "$logname"; then
      log_tail "$logname" 40
      die "$logname exited while waiting for $what"
    fi
    sleep 0.5
  done
}

# mTLS GET against a local component; the admin cert is cluster-admin.
curl_admin() {
  curl -sf --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"
}
