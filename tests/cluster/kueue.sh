# Kueue in the test cluster: build (sourced by build.sh), start and queues
# (sourced by up.sh after lib.sh, certs.sh and configs.sh), stop (down.sh).
#
# Kueue runs on the host like the training operator: a client cert of its own
# (RBAC: its upstream ClusterRole), CRDs from its Go module, its webhook
# server on the bridge address with a cert from pki/webhook-ca, and webhook
# configurations that point the apiserver at https://$HOST_IP:$KUEUE_WEBHOOK_PORT.
# See README.md ("Kueue").

KUEUE_MODULE=sigs.k8s.io/kueue
KUEUE_WEBHOOK_PORT=19444
KUEUE_PROBE_ADDR=127.0.0.1:18082
KUEUE_NAMESPACE=kueue-system
# Fixed in Kueue: without its internal cert management it always watches a
# metrics cert here, even with metrics off, and exits when none is there.
KUEUE_METRICS_CERT_DIR=/etc/kueue/metrics/certs
# The queues up.sh makes for the e2e suite. The ClusterQueue's quota holds
# exactly one 2-pod job of the suite's usual size (500m CPU, 1Gi per pod;
# tests/e2e/conftest_cli.py), GPUs included for jobs with resources.gpus.
KUEUE_FLAVOR=kdist-default
KUEUE_CLUSTER_QUEUE=kdist-e2e

kueue_module_dir() { printf '%s/go/mod/%s@%s' "$CACHE" "$KUEUE_MODULE" "$KUEUE_VERSION"; }

# --- build (build.sh's environment: CACHE, BIN, GOFLAGS, CGO_ENABLED, log) ---

build_kueue() {
  local out=$BIN/kueue-$KUEUE_VERSION
  [[ -x $out ]] && { log "kueue $KUEUE_VERSION cached"; return; }
  log "building kueue $KUEUE_VERSION"
  local dir=$CACHE/src/kueue commit
  mkdir -p "$dir"
  commit=$(go mod download -json "$KUEUE_MODULE@$KUEUE_VERSION" |
    python3 -c 'import json,sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash", "unknown"))')
  local v=$KUEUE_MODULE/pkg/version
  local ld="-s -w -X $v.GitVersion=$KUEUE_VERSION -X $v.GitCommit=$commit"
  (
    cd "$dir"
    printf 'module kdist.local/kueue\n\ngo 1.24\n' > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/kueue"\n' "$KUEUE_MODULE" > tools.go
    # go get (not go mod edit) so the go line follows Kueue's own minimum.
    go get "$KUEUE_MODULE@$KUEUE_VERSION" >/dev/null
    go mod tidy -e >/dev/null 2>&1 || true
    go build -trimpath -ldflags "$ld" -o "$out.tmp" "$KUEUE_MODULE/cmd/kueue"
  )
  mv "$out.tmp" "$out"
}

# --- start (up.sh's environment) ---------------------------------------------

kueue_certs() {
  # make_certs made the rest once; these are added to an existing $PKI too.
  [[ -f $PKI/kueue.crt ]] || new_cert ca kueue "/CN=system:kdist:kueue" clientAuth
  [[ -f $PKI/kueue-webhook.crt ]] ||
    new_cert webhook-ca kueue-webhook "/CN=kueue-webhook-service.$KUEUE_NAMESPACE.svc" serverAuth \
      "DNS:kueue-webhook-service.$KUEUE_NAMESPACE.svc,IP:$HOST_IP"
  write_kubeconfig "$ETC/kueue.kubeconfig" kueue
  local d
  for d in "$STATE/kueue/webhook-certs" "$KUEUE_METRICS_CERT_DIR"; do
    mkdir -p "$d"
    # Atomically and only when changed: Kueue watches them (see jobset_certs).
    put "$d/tls.crt" < "$PKI/kueue-webhook.crt"
    put "$d/tls.key" < "$PKI/kueue-webhook.key"
  done
}

# The integrations kdist renders (batch/job, kubeflow.org/pytorchjob,
# jobset.x-k8s.io/jobset, trainer.kubeflow.org/trainjob; jobset.sh and trainer.sh run
# their controllers and apply their CRDs before Kueue starts, so Kueue sets the
# integrations up at once instead of deferring them). manageJobsWithoutQueueName:
# false, so a job without the queue-name label is none of Kueue's business (nor is
# the JobSet Trainer makes for a queued TrainJob: it has no such label).
write_kueue_config() {
  put "$ETC/kueue.yaml" <<YAML
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $KUEUE_NAMESPACE
manageJobsWithoutQueueName: false
leaderElection:
  leaderElect: false
health:
  healthProbeBindAddress: $KUEUE_PROBE_ADDR
metrics:
  bindAddress: "0"
webhook:
  host: $HOST_IP
  port: $KUEUE_WEBHOOK_PORT
  certDir: $STATE/kueue/webhook-certs
internalCertManagement:
  enable: false
integrations:
  frameworks:
  - batch/job
  - kubeflow.org/pytorchjob
  - jobset.x-k8s.io/jobset
  - trainer.kubeflow.org/trainjob
YAML
}

# CRDs (from the module, as they are: no conversion webhook, every client
# here speaks v1beta2, the storage version), the upstream ClusterRole bound to
# Kueue's cert user, its namespace, and its webhook configurations.
kueue_apply_objects() {
  local mod; mod=$(kueue_module_dir)
  [[ -d $mod/config/components/crd/bases ]] || die "Kueue CRDs not found in $mod (run build.sh kueue)"
  local rbac=$mod/config/components/rbac
  {
    cat <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $KUEUE_NAMESPACE
YAML
    cat "$mod"/config/components/crd/bases/*.yaml
    # Upstream's kustomization prefixes every name with "kueue-" and puts the
    # namespaced ones in Kueue's namespace. The Secrets Role matters even with
    # MultiKueue off: without it the manager's cache never syncs and no
    # ClusterQueue becomes active.
    printf -- '\n---\n'
    sed 's/^  name: manager-role$/  name: kueue-manager-role/' "$rbac/role.yaml"
    printf -- '\n---\n'
    sed -e 's/^  name: manager-secrets-role$/  name: kueue-manager-secrets-role/' \
      -e "s/^  namespace: system\$/  namespace: $KUEUE_NAMESPACE/" "$rbac/manager_secrets_role.yaml"
    cat <<YAML
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kdist:kueue
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kueue-manager-role
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:kdist:kueue
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kdist:kueue-secrets
  namespace: $KUEUE_NAMESPACE
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kueue-manager-secrets-role
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:kdist:kueue
---
YAML
    python3 "$CLUSTER_SRC/kueue_webhooks.py" --manifests "$mod/config/components/webhook/manifests.yaml" \
      --url "https://$HOST_IP:$KUEUE_WEBHOOK_PORT" --ca "$PKI/webhook-ca.crt" \
      --exclude-namespace kube-system --exclude-namespace "$KUEUE_NAMESPACE"
  } | kubectl_ apply --server-side --force-conflicts -f - >>"$LOGS/apply.log" 2>&1 ||
    { tail -20 "$LOGS/apply.log"; die "applying Kueue's objects failed"; }
  wait_for "Kueue's CRDs to be established" 60 kube-apiserver \
    kubectl_ wait --for=condition=Established --timeout=5s \
    crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io \
    crd/resourceflavors.kueue.x-k8s.io crd/workloads.kueue.x-k8s.io
}

# A flavor and a ClusterQueue open to every namespace; each e2e test makes the
# LocalQueue it needs in its own namespace (tests/e2e/test_kueue.py).
kueue_queues() {
  cat <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: $KUEUE_FLAVOR
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $KUEUE_CLUSTER_QUEUE
spec:
  namespaceSelector: {}
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: $KUEUE_FLAVOR
      resources:
      - {name: cpu, nominalQuota: "1"}
      - {name: memory, nominalQuota: 2Gi}
      - {name: nvidia.com/gpu, nominalQuota: "2"}
YAML
}

start_kueue() {
  local bin=$BIN/kueue-$KUEUE_VERSION
  [[ -x $bin ]] || die "$bin missing (run build.sh kueue)"
  kueue_certs
  local before; before=$(cat "$ETC/kueue.yaml" 2>/dev/null || true)
  write_kueue_config
  # A running Kueue with an older config (an older up.sh): restart it.
  if [[ $before != "$(<"$ETC/kueue.yaml")" ]] && daemon_alive kueue; then stop_daemon kueue; fi
  kueue_apply_objects
  if ! daemon_alive kueue; then
    log "starting Kueue $KUEUE_VERSION"
    # VisibilityOnDemand is an aggregated API server of its own (a fixed cert
    # path, an APIService, delegated authn): not needed, the Workload's
    # conditions say why a job waits.
    start_daemon kueue "$bin" --config="$ETC/kueue.yaml" --kubeconfig="$ETC/kueue.kubeconfig" \
      --feature-gates=VisibilityOnDemand=false
  fi
  wait_for "Kueue /readyz" 90 kueue curl -sf --max-time 2 "http://$KUEUE_PROBE_ADDR/readyz"
  # The ClusterQueue and ResourceFlavor go through Kueue's own webhooks: retry
  # until the apiserver reaches them.
  wait_for "Kueue's webhooks to admit the e2e queues" 60 kueue kueue_apply_queues
  wait_for "ClusterQueue $KUEUE_CLUSTER_QUEUE to be active" 60 kueue \
    kubectl_ wait --for=condition=Active --timeout=5s "clusterqueue/$KUEUE_CLUSTER_QUEUE"
}

kueue_apply_queues() {
  kueue_queues | kubectl_ apply --server-side --force-conflicts -f - >>"$LOGS/apply.log" 2>&1
}

# --- stop (down.sh) -----------------------------------------------------------

stop_kueue() {
  stop_daemon kueue
  rm -rf "$KUEUE_METRICS_CERT_DIR"
  rmdir /etc/kueue/metrics /etc/kueue 2>/dev/null || true
}
