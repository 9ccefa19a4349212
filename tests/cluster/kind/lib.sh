# Settings and helpers of the kind cluster scripts (sourced, never run).
# Reuses the single-node harness's lib.sh (pinned versions, the binary cache,
# process and wait helpers) with this cluster's own state directory, so the
# two clusters can run side by side without touching each other.
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
KIND_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$KIND_SRC/versions.env"

# Per checkout, git-ignored: kubeconfig, logs, dockerd's socket and PIDs, the
# directory both nodes mount. The harness's names, re-pointed here.
STATE=$REPO/.cluster-kind
LOGS=$STATE/logs
RUN=$STATE/run
ETC=$STATE/etc
KIND_KUBECONFIG=$STATE/kubeconfig
# Bind-mounted into both nodes at the same path: hostPath volumes under it are
# storage every node reaches (checkpoints that outlive a node), and tests that
# make a hostPath PV in a host temp directory find it on the nodes when
# TMPDIR points here (see README.md).
SHARED=$STATE/shared

# Shared by checkouts: kind's own Docker data root (node images, node /var
# volumes), the base rootfs tarball, kind and the two extra Kubernetes binaries.
KIND_CACHE=$CACHE/kind
DOCKER_ROOT=$KIND_CACHE/docker
DOCKER_SOCK=$RUN/docker.sock
DOCKER_CLI=/usr/bin/docker          # docker.io's CLI, the daemon's own version
KIND_BIN=$BIN/kind-$KIND_VERSION

CLUSTER_NAME=kdist
CONTROL_PLANE=$CLUSTER_NAME-control-plane
WORKER=$CLUSTER_NAME-worker
# The nodes' Docker network. Private and unused here; it must overlap neither
# the single-node harness's ranges (10.244/16, 10.96/16) nor kind's own below.
NODE_NET_NAME=kdist-kind
NODE_NET=172.30.0.0/24
NODE_GW=172.30.0.1
NODE_BRIDGE=kdist-kind0
KIND_POD_NET=10.245.0.0/16
KIND_SVC_NET=10.97.0.0/16
# Policy routing: whatever arrives from the nodes' bridge and is not for this
# machine is answered "unreachable" instead of being forwarded.
ISOLATION_TABLE=17230
ISOLATION_PRIORITY=17230

TRAIN_IMAGE=kdist-train:dev-cpu
# The same image without kdist (spec.runtime shipped), where image.sh built it.
BARE_IMAGE=kdist-bare:dev-cpu
# Where the training image is taken from: kind's own dockerd, where up.sh
# builds the small Debian-torch image (../image.sh --forky); or another Docker
# that has one under this name (the single-node harness's, read only).
IMAGE_SOURCE_SOCK=${KDIST_KIND_IMAGE_SOURCE:-$DOCKER_SOCK}

LOG_TAG=${LOG_TAG:-kind}

docker_() { DOCKER_HOST=unix://$DOCKER_SOCK "$DOCKER_CLI" "$@"; }
# kind, through the docker shim (shim/docker) and this cluster's dockerd.
kind_() {
  DOCKER_HOST=unix://$DOCKER_SOCK PATH=$KIND_SRC/shim:$PATH KDIST_KIND_DOCKER=$DOCKER_CLI \
    KDIST_KIND_CLUSTER=$CLUSTER_NAME KDIST_KIND_GATEWAY=$NODE_GW KDIST_KIND_EMPTY_DIR=$RUN/empty \
    KIND_EXPERIMENTAL_DOCKER_NETWORK=$NODE_NET_NAME "$KIND_BIN" "$@"
}
kubectl_() { "$KUBECTL" --kubeconfig "$KIND_KUBECONFIG" "$@"; }
node_exec() { local node=$1; shift; docker_ exec "$node" "$@"; }

# Is the kind cluster's dockerd ours and answering?
dockerd_up() { daemon_alive dockerd && docker_ info >/dev/null 2>&1; }

# Deletes the kind cluster and anything else labelled with its name.
delete_kind_cluster() {
  if [[ -x $KIND_BIN ]] && kind_ get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    log "deleting kind cluster $CLUSTER_NAME"
    kind_ delete cluster --name "$CLUSTER_NAME" >>"$LOGS/kind-delete.log" 2>&1 ||
      log "kind delete cluster failed; see $LOGS/kind-delete.log"
  fi
  local c
  for c in $(docker_ ps -aq --filter "label=io.x-k8s.kind.cluster=$CLUSTER_NAME"); do
    docker_ rm -f -v "$c" >/dev/null 2>&1 || true
  done
}
