# The JobSet controller (sigs.k8s.io/jobset, JOBSET_VERSION) in the test
# cluster: start (sourced by up.sh after lib.sh, certs.sh and configs.sh) and
# stop (down.sh). build.sh builds it (`build.sh jobset`).
#
# It runs on the host like the training operator and Kueue: a client cert of
# its own (RBAC: upstream's ClusterRole), the CRD from its Go module, its
# webhook server on the bridge address with a cert from pki/webhook-ca, and
# webhook configurations that point the apiserver at
# https://$HOST_IP:$JOBSET_WEBHOOK_PORT. See README.md ("JobSet").

JOBSET_MODULE=sigs.k8s.io/jobset
JOBSET_WEBHOOK_PORT=19445
JOBSET_PROBE_ADDR=127.0.0.1:18083
# Only the webhook serving cert's DNS name (upstream's Service); nothing is
# created in this namespace.
JOBSET_NAMESPACE=jobset-system

jobset_module_dir() { printf '%s/go/mod/%s@%s' "$CACHE" "$JOBSET_MODULE" "$JOBSET_VERSION"; }

jobset_certs() {
  # make_certs made the rest once; these are added to an existing $PKI too.
  [[ -f $PKI/jobset.crt ]] || new_cert ca jobset "/CN=system:kdist:jobset" clientAuth
  [[ -f $PKI/jobset-webhook.crt ]] ||
    new_cert webhook-ca jobset-webhook "/CN=jobset-webhook-service.$JOBSET_NAMESPACE.svc" serverAuth \
      "DNS:jobset-webhook-service.$JOBSET_NAMESPACE.svc,IP:$HOST_IP"
  write_kubeconfig "$ETC/jobset.kubeconfig" jobset
  # Its own directory: the default (/tmp/k8s-webhook-server/serving-certs) is
  # the training operator's.
  local d=$STATE/jobset/webhook-certs
  # put: replaced atomically and only when changed, as the controller watches
  # these files (cp over them made it read a half-written cert on every up.sh).
  mkdir -p "$d"
  put "$d/tls.crt" < "$PKI/jobset-webhook.crt"
  put "$d/tls.key" < "$PKI/jobset-webhook.key"
}

# Internal cert management off (it would rewrite the webhook configurations
# and a Secret for an in-cluster Service; ours are static, by URL); leader
# election and metrics off; probes and webhook off every other port here.
write_jobset_config() {
  put "$ETC/jobset.yaml" <<YAML
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
health:
  healthProbeBindAddress: $JOBSET_PROBE_ADDR
metrics:
  bindAddress: "0"
webhook:
  host: $HOST_IP
  port: $JOBSET_WEBHOOK_PORT
  certDir: $STATE/jobset/webhook-certs
YAML
}

# The CRD (as it is in the module: one version, v1alpha2, no conversion),
# upstream's ClusterRole (everything the controller's kubebuilder markers ask
# for) bound to the controller's cert user, and its webhook configurations.
jobset_apply_objects() {
  local mod; mod=$(jobset_module_dir)
  [[ -f $mod/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml ]] ||
    die "JobSet CRD not found in $mod (run build.sh jobset)"
  {
    cat "$mod/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
    printf -- '\n---\n'
    # Upstream's kustomization prefixes every name with "jobset-".
    sed 's/^  name: manager-role$/  name: jobset-manager-role/' "$mod/config/components/rbac/role.yaml"
    cat <<YAML
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kdist:jobset
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: jobset-manager-role
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:kdist:jobset
---
YAML
    python3 "$CLUSTER_SRC/jobset_webhooks.py" --webhook-dir "$mod/config/components/webhook" \
      --url "https://$HOST_IP:$JOBSET_WEBHOOK_PORT" --ca "$PKI/webhook-ca.crt"
  } | kubectl_ apply --server-side --force-conflicts -f - >>"$LOGS/apply.log" 2>&1 ||
    { tail -20 "$LOGS/apply.log"; die "applying JobSet's objects failed"; }
  wait_for "the JobSet CRD to be established" 60 kube-apiserver \
    kubectl_ wait --for=condition=Established --timeout=5s crd/jobsets.jobset.x-k8s.io
}

start_jobset() {
  local bin=$BIN/jobset-$JOBSET_VERSION
  [[ -x $bin ]] || die "$bin missing (run build.sh jobset)"
  jobset_certs
  local before; before=$(cat "$ETC/jobset.yaml" 2>/dev/null || true)
  write_jobset_config
  # A running controller with an older config (an older up.sh): restart it.
  if [[ $before != "$(<"$ETC/jobset.yaml")" ]] && daemon_alive jobset; then stop_daemon jobset; fi
  jobset_apply_objects
  if ! daemon_alive jobset; then
    log "starting JobSet $JOBSET_VERSION"
    start_daemon jobset "$bin" --config="$ETC/jobset.yaml" --kubeconfig="$ETC/jobset.kubeconfig" \
      --zap-log-level=info
  fi
  wait_for "JobSet /readyz" 90 jobset curl -sf --max-time 2 "http://$JOBSET_PROBE_ADDR/readyz"
  # Ready means its webhook server listens; this is the apiserver reaching it.
  wait_for "JobSet's webhooks to admit a JobSet (server-side dry run)" 60 jobset jobset_dry_run
}

jobset_dry_run() {
  kubectl_ -n default create --dry-run=server -o name -f - <<'YAML'
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: kdist-up-probe
spec:
  replicatedJobs:
  - name: w
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: c
              image: registry.k8s.io/pause:3.10
YAML
}

stop_jobset() {
  stop_daemon jobset
}
