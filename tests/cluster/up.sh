#!/usr/bin/env bash
# Brings up (or checks and repairs) the single-node test cluster: etcd,
# kube-apiserver, controller-manager, scheduler, containerd, kubelet, CoreDNS,
# the Kubeflow training operator, the JobSet controller, Kubeflow Trainer v2 and Kueue, all host
# processes on the bridge kbr0; the node advertises fake GPUs.
# Idempotent: a healthy cluster is reused in seconds; a dead component is
# restarted. Writes .cluster/kubeconfig. See README.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$CLUSTER_SRC/certs.sh"
source "$CLUSTER_SRC/configs.sh"
source "$CLUSTER_SRC/jobset.sh"
source "$CLUSTER_SRC/trainer.sh"
source "$CLUSTER_SRC/kueue.sh"
source "$CLUSTER_SRC/fakegpu.sh"
LOG_TAG=up
START=$SECONDS

INITWAIT_BIN=$BIN/kdist-initwait-$(sha256sum "$INITWAIT_SRC" | cut -c1-12)
INITWAIT_IMAGE=kdist-initwait:${INITWAIT_BIN##*-}
OPERATOR_MODULE=$CACHE/go/mod/github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION

preflight() {
  require_root
  mkdir -p "$LOGS" "$RUN"
  ensure_packages containerd runc containernetworking-plugins iproute2 openssl curl gcc libc6-dev
  # The other cluster's ports and bridge are global: one cluster per machine.
  if [[ -f $OWNER_FILE && $(<"$OWNER_FILE") != "$STATE" ]]; then
    local other f; other=$(<"$OWNER_FILE")
    for f in "$other"/run/*.pid; do
      [[ -f $f ]] && kill -0 "$(<"$f")" 2>/dev/null &&
        die "a kdist test cluster from $other is running (its ports and $BRIDGE are global); use its kubeconfig ($other/kubeconfig) or stop it: bash $(dirname "$other")/tests/cluster/down.sh"
    done
  fi
  echo "$STATE" > "$OWNER_FILE"
  check_routes
  if [[ ! -x $KUBECTL || ! -x $BIN/etcd-$ETCD_VERSION || ! -x $BIN/coredns-$COREDNS_VERSION ||
        ! -x $BIN/training-operator-$TRAINING_OPERATOR_VERSION || ! -x $INITWAIT_BIN ||
        ! -x $BIN/crictl-$CRICTL_VERSION || ! -x $BIN/kueue-$KUEUE_VERSION ||
        ! -x $BIN/jobset-$JOBSET_VERSION || ! -x $BIN/trainer-$TRAINER_VERSION ]]; then
    log "building cluster binaries (log: $LOGS/build.log; cold: 15-30 min)"
    bash "$CLUSTER_SRC/build.sh" >>"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; die "build.sh failed"; }
  fi
}

# The pod and service ranges must not overlap any route or address but our
# own (kbr0's and the unreachable ones below): they must never meet a real
# network.
check_routes() {
  local conflicts
  conflicts=$({ ip -4 -o route show; ip -4 -o addr show; } | python3 -c '
import ipaddress, sys
ours = [ipaddress.ip_network(n) for n in sys.argv[2:]]
for line in sys.stdin:
    f = line.split()
    if " dev " + sys.argv[1] + " " in line + " " or f[0] == "unreachable" or f[0] == "default":
        continue
    dst = f[3] if f[2] == "inet" else f[0]   # addr lines: "N: IF inet A/P ..."
    if f[2] == "inet" and f[1] == sys.argv[1]:
        continue
    try:
        net = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        continue
    if any(net.overlaps(o) for o in ours):
        print(line.strip())
' "$BRIDGE" "$POD_NET" "$SVC_NET")
  [[ -z $conflicts ]] || die "routes or addresses overlap the cluster's ranges ($POD_NET, $SVC_NET): $conflicts"
}

setup_network() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "creating bridge $BRIDGE $HOST_IP/24"
    ip link add "$BRIDGE" type bridge
  fi
  # A bridge without a MAC of its own takes the lowest of its ports' and
  # changes it as pods come and go; pods that cached the old one (ARP, ~30 s)
  # then lose every packet to the host, CoreDNS included, for that long. Fix it.
  ip link set "$BRIDGE" address "$BRIDGE_MAC"
  ip addr replace "$HOST_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # Service IPs have no kube-proxy behind them, and only kbr0's /24 of the
  # pod range exists: keep any other packet to these ranges on this machine
  # (answered "unreachable") instead of letting the default route take it.
  ip route replace unreachable "$SVC_NET"
  ip route replace unreachable "$POD_NET"
}

start_etcd() {
  daemon_alive etcd && return 0
  log "starting etcd"
  mkdir -p "$STATE/etcd"
  start_daemon etcd "$BIN/etcd-$ETCD_VERSION" \
    --name kdist --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster kdist=http://127.0.0.1:2380 \
    --listen-metrics-urls http://127.0.0.1:2381 \
    --quota-backend-bytes 2147483648 --log-level warn
  wait_for "etcd health" 60 etcd curl -sf --max-time 2 http://127.0.0.1:2379/health
}

start_apiserver() {
  daemon_alive kube-apiserver && return 0
  log "starting kube-apiserver"
  start_daemon kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address="$HOST_IP" --secure-port=6443 --advertise-address="$HOST_IP" \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SVC_NET" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --feature-gates="$K8S_FEATURE_GATES" --runtime-config="$K8S_RUNTIME_CONFIG" \
    --profiling=false --v=1
  wait_for "kube-apiserver /readyz" 120 kube-apiserver curl_admin "$API_URL/readyz"
}

start_controllers() {
  if ! daemon_alive kube-controller-manager; then
    log "starting kube-controller-manager"
    local kc=$ETC/kube-controller-manager.kubeconfig
    start_daemon kube-controller-manager "$K8S_BIN/kube-controller-manager" \
      --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
      --bind-address=127.0.0.1 --leader-elect=false \
      --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
      --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
      --use-service-account-credentials=true \
      --service-cluster-ip-range="$SVC_NET" --feature-gates="$K8S_FEATURE_GATES" --v=1
  fi
  if ! daemon_alive kube-scheduler; then
    log "starting kube-scheduler"
    local kc=$ETC/kube-scheduler.kubeconfig
    start_daemon kube-scheduler "$K8S_BIN/kube-scheduler" \
      --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
      --bind-address=127.0.0.1 --leader-elect=false --feature-gates="$K8S_FEATURE_GATES" --v=1
  fi
  wait_for "kube-controller-manager /healthz" 60 kube-controller-manager \
    curl -skf --max-time 2 https://127.0.0.1:10257/healthz
  wait_for "kube-scheduler /healthz" 60 kube-scheduler \
    curl -skf --max-time 2 https://127.0.0.1:10259/healthz
}

# RBAC for the host-run add-ons, the kubeflow namespace, the PyTorchJob CRD
# from the operator's module and its validating webhook (served by the
# out-of-cluster operator on the bridge address).
apply_objects() {
  local crds=$OPERATOR_MODULE/manifests/base/crds
  [[ -f $crds/kubeflow.org_pytorchjobs.yaml ]] || die "PyTorchJob CRD not found in $OPERATOR_MODULE (run build.sh operator)"
  kubectl_ apply --server-side --force-conflicts -f "$CLUSTER_SRC/config/cluster-objects.yaml" \
    -f "$OPERATOR_MODULE/manifests/base/rbac/role.yaml" -f "$crds/kubeflow.org_pytorchjobs.yaml" \
    >>"$LOGS/apply.log" 2>&1 || { tail -20 "$LOGS/apply.log"; die "applying cluster objects failed"; }
  kubectl_ -n kubeflow create secret generic training-operator-webhook-cert \
    --from-file=ca.crt="$PKI/webhook-ca.crt" --from-file=ca.key="$PKI/webhook-ca.key" \
    --from-file=tls.crt="$PKI/webhook.crt" --from-file=tls.key="$PKI/webhook.key" \
    --dry-run=client -o yaml | kubectl_ apply --server-side --force-conflicts -f - >>"$LOGS/apply.log" 2>&1
  webhook_config | kubectl_ apply --server-side --force-conflicts -f - >>"$LOGS/apply.log" 2>&1 ||
    { tail -20 "$LOGS/apply.log"; die "applying the operator's webhook configuration failed"; }
  wait_for "the PyTorchJob CRD to be established" 60 kube-apiserver \
    kubectl_ wait --for=condition=Established --timeout=5s crd/pytorchjobs.kubeflow.org
}

webhook_config() {
  cat <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validator.training-operator.kubeflow.org
webhooks:
- name: validator.pytorchjob.training-operator.kubeflow.org
  admissionReviewVersions: [v1]
  clientConfig:
    url: https://$HOST_IP:19443/validate-kubeflow-org-v1-pytorchjob
    caBundle: $(base64 -w0 "$PKI/webhook-ca.crt")
  failurePolicy: Fail
  sideEffects: None
  timeoutSeconds: 10
  rules:
  - apiGroups: [kubeflow.org]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [pytorchjobs]
YAML
}

start_containerd() {
  if ! daemon_alive containerd; then
    log "starting containerd"
    start_daemon containerd /usr/bin/containerd --config "$ETC/containerd.toml"
  fi
  wait_for "containerd" 60 containerd ctr_ version
  import_local_images
}

# The pause image and the operator's init-container image: one static binary
# each, packed without a daemon (mkimage.py). Imported once per containerd root.
import_local_images() {
  local work=$STATE/images
  mkdir -p "$work"
  if ! ctr_ images ls -q | grep -qx "$PAUSE_IMAGE"; then
    log "importing $PAUSE_IMAGE"
    gcc -Os -static -o "$work/pause" "$CLUSTER_SRC/pause/pause.c"
    strip "$work/pause"
    python3 "$CLUSTER_SRC/mkimage.py" --tag "$PAUSE_IMAGE" --out "$work/pause.tar" \
      --entrypoint /pause --user 65535:65535 "$work/pause:/pause"
    ctr_ images import "$work/pause.tar" >/dev/null
  fi
  if ! ctr_ images ls -q | grep -qx "docker.io/library/$INITWAIT_IMAGE"; then
    log "importing $INITWAIT_IMAGE"
    python3 "$CLUSTER_SRC/mkimage.py" --tag "$INITWAIT_IMAGE" --out "$work/initwait.tar" \
      --entrypoint /kdist-initwait --user 65532:65532 "$INITWAIT_BIN:/kdist-initwait"
    ctr_ images import "$work/initwait.tar" >/dev/null
  fi
  rm -rf "$work"
}

start_kubelet() {
  if ! daemon_alive kubelet; then
    log "starting kubelet"
    mkdir -p "$STATE/kubelet" "$STATE/pod-logs"
    start_daemon kubelet "$K8S_BIN/kubelet" \
      --config="$ETC/kubelet.yaml" --kubeconfig="$ETC/kubelet-client.kubeconfig" \
      --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
      --hostname-override="$NODE_NAME" --node-ip="$HOST_IP" --v=1
  fi
  wait_for "node $NODE_NAME to register" 90 kubelet kubectl_ get node "$NODE_NAME"
  wait_for "node $NODE_NAME to be Ready" 120 kubelet \
    kubectl_ wait --for=condition=Ready --timeout=5s node "$NODE_NAME"
}

start_coredns() {
  if ! daemon_alive coredns; then
    log "starting CoreDNS"
    start_daemon coredns "$BIN/coredns-$COREDNS_VERSION" -conf "$ETC/Corefile"
  fi
  wait_for "CoreDNS /ready" 60 coredns curl -sf --max-time 2 http://127.0.0.1:18181/ready
  wait_for "CoreDNS to resolve kubernetes.default" 30 coredns \
    python3 "$CLUSTER_SRC/dnsprobe.py" "$HOST_IP" kubernetes.default.svc.cluster.local
  python3 "$CLUSTER_SRC/dnsprobe.py" "$HOST_IP" example.com --expect nxdomain >/dev/null ||
    die "CoreDNS answers names outside cluster.local; it must answer NXDOMAIN"
}

start_operator() {
  if ! daemon_alive training-operator; then
    log "starting training-operator"
    # The webhook server reads its cert from this fixed path; the same cert
    # is in the Secret the cert rotator checks, so the rotator keeps it.
    mkdir -p "$WEBHOOK_CERT_DIR"
    cp "$PKI/webhook.crt" "$WEBHOOK_CERT_DIR/tls.crt"
    cp "$PKI/webhook.key" "$WEBHOOK_CERT_DIR/tls.key"
    start_daemon training-operator "$BIN/training-operator-$TRAINING_OPERATOR_VERSION" \
      --kubeconfig="$ETC/training-operator.kubeconfig" --enable-scheme=pytorchjob \
      --metrics-bind-address=0 --health-probe-bind-address=127.0.0.1:18081 \
      --webhook-server-port=19443 \
      --pytorch-init-container-image="$INITWAIT_IMAGE" \
      --pytorch-init-container-template-file="$ETC/pytorch-init-container.yaml"
  fi
  wait_for "training-operator /readyz" 90 training-operator \
    curl -sf --max-time 2 http://127.0.0.1:18081/readyz
}

main() {
  require_root
  take_lock
  preflight
  make_certs
  make_kubeconfigs
  write_configs
  setup_network
  start_etcd
  start_apiserver
  start_controllers
  apply_objects
  start_containerd
  start_kubelet
  advertise_fake_gpus
  start_coredns
  start_operator
  # Before Kueue: its JobSet and TrainJob integrations want their CRDs there at start.
  start_jobset
  start_trainer
  start_kueue
  write_kubeconfig "$ADMIN_KUBECONFIG" admin
  log "Kubernetes $K8S_VERSION, feature gates on: $K8S_FEATURE_GATES; runtime-config: $K8S_RUNTIME_CONFIG"
  log "cluster ready in $((SECONDS - START))s: KUBECONFIG=$ADMIN_KUBECONFIG"
}

main "$@"
