# Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2, TRAINER_VERSION) in the test
# cluster: start (sourced by up.sh after lib.sh, certs.sh, configs.sh and jobset.sh) and
# stop (down.sh). build.sh builds it (`build.sh trainer`).
#
# Its controller manager runs on the host like the JobSet controller it builds on: a
# client cert of its own (RBAC: upstream's ClusterRole), the CRDs from its Go module
# (TrainJob, TrainingRuntime, ClusterTrainingRuntime), its webhook server on the bridge
# address with a cert from pki/webhook-ca, and webhook configurations that point the
# apiserver at https://$HOST_IP:$TRAINER_WEBHOOK_PORT (made by jobset_webhooks.py from
# upstream's manifests/base/webhook). See README.md ("Kubeflow Trainer").

TRAINER_MODULE=github.com/kubeflow/trainer/v2
TRAINER_WEBHOOK_PORT=19446
TRAINER_PROBE_ADDR=127.0.0.1:18084
# Only the webhook serving cert's DNS name (upstream's Service); nothing is created there.
TRAINER_NAMESPACE=kubeflow-system

trainer_module_dir() { printf '%s/go/mod/%s@%s' "$CACHE" "$TRAINER_MODULE" "$TRAINER_VERSION"; }

# Its webhook server has no cert-dir setting: controller-runtime's default is
# $TMPDIR/k8s-webhook-server/serving-certs, so it gets a TMPDIR of its own (the default
# /tmp one is the training operator's).
trainer_tmpdir() { printf '%s/trainer/tmp' "$STATE"; }

trainer_certs() {
  [[ -f $PKI/trainer.crt ]] || new_cert ca trainer "/CN=system:kdist:trainer" clientAuth
  [[ -f $PKI/trainer-webhook.crt ]] ||
    new_cert webhook-ca trainer-webhook \
      "/CN=kubeflow-trainer-controller-manager.$TRAINER_NAMESPACE.svc" serverAuth \
      "DNS:kubeflow-trainer-controller-manager.$TRAINER_NAMESPACE.svc,IP:$HOST_IP"
  write_kubeconfig "$ETC/trainer.kubeconfig" trainer
  local d; d=$(trainer_tmpdir)/k8s-webhook-server/serving-certs
  mkdir -p "$d"
  # put: atomically and only when changed (the server watches these files).
  put "$d/tls.crt" < "$PKI/trainer-webhook.crt"
  put "$d/tls.key" < "$PKI/trainer-webhook.key"
}

# Its own cert management off (it would rewrite the webhook configurations and a Secret
# for an in-cluster Service; ours are static, by URL); leader election and metrics off;
# probes and webhook off every other port here.
write_trainer_config() {
  put "$ETC/trainer.yaml" <<YAML
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
certManagement:
  enable: false
health:
  healthProbeBindAddress: $TRAINER_PROBE_ADDR
metrics:
  bindAddress: "0"
webhook:
  host: $HOST_IP
  port: $TRAINER_WEBHOOK_PORT
YAML
}

trainer_apply_objects() {
  local mod; mod=$(trainer_module_dir)
  [[ -d $mod/manifests/base/crds ]] || die "Trainer's CRDs not found in $mod (run build.sh trainer)"
  {
    local crd
    for crd in trainjobs trainingruntimes clustertrainingruntimes; do
      cat "$mod/manifests/base/crds/trainer.kubeflow.org_$crd.yaml"
      printf -- '\n---\n'
    done
    cat "$mod/manifests/base/rbac/role.yaml"
    cat <<YAML
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kdist:trainer
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kubeflow-trainer-controller-manager
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:kdist:trainer
---
YAML
    python3 "$CLUSTER_SRC/jobset_webhooks.py" --webhook-dir "$mod/manifests/base/webhook" \
      --prefix "" --url "https://$HOST_IP:$TRAINER_WEBHOOK_PORT" --ca "$PKI/webhook-ca.crt"
  } | kubectl_ apply --server-side --force-conflicts -f - >>"$LOGS/apply.log" 2>&1 ||
    { tail -20 "$LOGS/apply.log"; die "applying Kubeflow Trainer's objects failed"; }
  local crd
  for crd in trainjobs trainingruntimes clustertrainingruntimes; do
    wait_for "the $crd CRD to be established" 60 kube-apiserver \
      kubectl_ wait --for=condition=Established --timeout=5s "crd/$crd.trainer.kubeflow.org"
  done
}

start_trainer() {
  local bin=$BIN/trainer-$TRAINER_VERSION
  [[ -x $bin ]] || die "$bin missing (run build.sh trainer)"
  trainer_certs
  local before; before=$(cat "$ETC/trainer.yaml" 2>/dev/null || true)
  write_trainer_config
  if [[ $before != "$(<"$ETC/trainer.yaml")" ]] && daemon_alive trainer; then stop_daemon trainer; fi
  trainer_apply_objects
  if ! daemon_alive trainer; then
    log "starting Kubeflow Trainer $TRAINER_VERSION"
    (export TMPDIR; TMPDIR=$(trainer_tmpdir)
     start_daemon trainer "$bin" --config="$ETC/trainer.yaml" --kubeconfig="$ETC/trainer.kubeconfig" \
       --zap-log-level=info) || die "Kubeflow Trainer did not start"
  fi
  wait_for "Kubeflow Trainer /readyz" 90 trainer curl -sf --max-time 2 "http://$TRAINER_PROBE_ADDR/readyz"
  # Ready means its webhook server listens; this is the apiserver reaching it.
  wait_for "Trainer's webhooks to admit a TrainingRuntime (server-side dry run)" 60 trainer \
    trainer_dry_run
}

trainer_dry_run() {
  kubectl_ -n default create --dry-run=server -o name -f - <<'YAML'
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: kdist-up-probe
spec:
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          spec:
            template:
              spec:
                restartPolicy: Never
                containers:
                - name: node
                  image: registry.k8s.io/pause:3.10
YAML
}

stop_trainer() {
  stop_daemon trainer
}
