#!/usr/bin/env bash
# Fake nodes for the scale tests (issue 53): kwok (sigs.k8s.io/kwok, KWOK_VERSION,
# `build.sh kwok`) attached to the running single-node cluster.
#
#   kwok.sh up N     start kwok (once) and make nodes kwok-node-0 .. kwok-node-(N-1), Ready
#   kwok.sh down     delete every kwok node (and the pods still bound to them), stop kwok
#   kwok.sh status   how many kwok nodes there are, and whether kwok runs
#
# The cluster is left as it was found: `down` removes exactly what `up` made. Real test pods
# never land on a fake node: each carries the taint kwok.x-k8s.io/node=fake:NoSchedule, and
# only the scale tests' pods tolerate it (and select the label type=kwok). kwok manages only
# the nodes labelled kwok.x-k8s.io/node=fake and the pods bound to them; the real node's
# kubelet is untouched.
#
# What kwok does to a pod on a fake node (its stages, below):
# - Pending -> Running at once (kwok's own pod-ready stage);
# - Running -> Succeeded after the pod's label kwok.kdist.dev/run-for (a Go duration, "30s"),
#   when the job spec's metadata.labels carry it;
# - Running -> Succeeded (exit 0) or Failed (exit code N) as soon as a test annotates the pod
#   kwok.kdist.dev/exit=N;
# - deleted pods go at once (kwok's pod-delete stage).
# A pod's log (through the API server, which asks kwok's server on HOST_IP:KWOK_PORT as it
# would a kubelet) is a few of kdist's JSON step lines.
#
# The cluster is the one this machine runs (/run/kdist-cluster.owner names its state
# directory), whichever checkout started it; kwok's own files go under that state directory
# (kwok/, logs/kwok.log, run/kwok.pid), so the cluster's down.sh stops it too.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
LOG_TAG=kwok

if [[ -f $OWNER_FILE ]]; then
  STATE=$(<"$OWNER_FILE")
  LOGS=$STATE/logs RUN=$STATE/run PKI=$STATE/pki ETC=$STATE/etc
fi
KWOK_BIN=$BIN/kwok-$KWOK_VERSION
KWOK_DIR=$STATE/kwok
KWOK_PORT=10261  # kwok's kubelet-like server (logs), on HOST_IP beside the real kubelet's 10250
KWOK_POD_CIDR=10.200.0.0/16  # fake pods' addresses: status only, never routed
KWOK_LABEL=kwok.x-k8s.io/node=fake
KWOK_MODULE_DIR=$CACHE/go/mod/sigs.k8s.io/kwok@$KWOK_VERSION

# kwok's own stages (its module's kustomize/stage) that we keep as they are.
KWOK_STAGES=(node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease
             pod/fast/pod-ready pod/fast/pod-delete)

write_config() {
  mkdir -p "$KWOK_DIR"
  local s
  {
    for s in "${KWOK_STAGES[@]}"; do
      [[ -f $KWOK_MODULE_DIR/kustomize/stage/$s.yaml ]] ||
        die "no $s stage in $KWOK_MODULE_DIR (run: bash tests/cluster/build.sh kwok)"
      printf -- '---\n'; cat "$KWOK_MODULE_DIR/kustomize/stage/$s.yaml"
    done
    cat <<YAML
---
# A test ends a pod: kwok.kdist.dev/exit=N (0: Succeeded, else Failed with exit code N).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: kdist-pod-exit
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.annotations["kwok.kdist.dev/exit"]', operator: Exists}
  next:
    statusTemplate: |
      {{ \$now := Now }}
      {{ \$code := index .metadata.annotations "kwok.kdist.dev/exit" }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ \$code }}
            finishedAt: {{ \$now | Quote }}
            reason: {{ if eq \$code "0" }}Completed{{ else }}Error{{ end }}
            startedAt: {{ \$now | Quote }}
      {{ end }}
      phase: {{ if eq \$code "0" }}Succeeded{{ else }}Failed{{ end }}
---
# A job that runs for a while: the label kwok.kdist.dev/run-for (from the job spec's labels).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: kdist-pod-run-for
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.labels["kwok.kdist.dev/run-for"]', operator: Exists}
    - {key: '.metadata.annotations["kwok.kdist.dev/exit"]', operator: DoesNotExist}
  delay:
    durationFrom: {expressionFrom: '.metadata.labels["kwok.kdist.dev/run-for"]'}
  next:
    statusTemplate: |
      {{ \$now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ \$now | Quote }}
            reason: Completed
            startedAt: {{ \$now | Quote }}
      {{ end }}
      phase: Succeeded
---
# Every fake pod's log: what a kdist workload prints (kwok reads it in the CRI log format).
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: kdist-steps
spec:
  logs:
  - logsFile: $KWOK_DIR/steps.log
    follow: true
YAML
  } | put "$KWOK_DIR/kwok.yaml"
  local t=2026-01-01T00:00:0
  put "$KWOK_DIR/steps.log" <<LOG
${t}0.000000000Z stdout F rank starting (kwok)
${t}1.000000000Z stdout F {"event": "step", "step": 10, "loss": 0.9, "samples_per_s": 100.0}
${t}2.000000000Z stdout F {"event": "step", "step": 20, "loss": 0.5, "samples_per_s": 100.0}
LOG
}

start_kwok() {
  [[ -x $KWOK_BIN ]] || die "no $KWOK_BIN: run bash tests/cluster/build.sh kwok"
  [[ -f $ETC/admin.kubeconfig ]] || die "no running cluster at $STATE (make cluster-up)"
  write_config
  daemon_alive kwok && return 0
  log "starting kwok $KWOK_VERSION (log: $LOGS/kwok.log)"
  start_daemon kwok "$KWOK_BIN" --kubeconfig="$ETC/admin.kubeconfig" --config="$KWOK_DIR/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-label-selector="$KWOK_LABEL" \
    --node-ip="$HOST_IP" --node-port="$KWOK_PORT" --server-address="$HOST_IP:$KWOK_PORT" \
    --tls-cert-file="$PKI/kubelet-serving.crt" --tls-private-key-file="$PKI/kubelet-serving.key" \
    --cidr="$KWOK_POD_CIDR" --node-lease-duration-seconds=40
}

nodes_yaml() {  # nodes_yaml N: a List of N fake nodes
  local i
  printf 'apiVersion: v1\nkind: List\nitems:\n'
  for ((i = 0; i < $1; i++)); do
    cat <<YAML
- apiVersion: v1
  kind: Node
  metadata:
    name: kwok-node-$i
    labels: {type: kwok, kwok.x-k8s.io/node: fake, kubernetes.io/hostname: kwok-node-$i,
             kubernetes.io/os: linux, kubernetes.io/arch: amd64}
    annotations: {node.alpha.kubernetes.io/ttl: "0"}
  spec:
    taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
  status:
    capacity: {cpu: "4", memory: 16Gi, pods: "110"}
    allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
YAML
  done
}

ready_count() {
  kubectl_ get nodes -l "$KWOK_LABEL" --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l
}

up() {
  local n=${1:?usage: kwok.sh up N}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 5000)) || die "N must be 1 to 5000, not $n"
  start_kwok
  local have
  have=$(kubectl_ get nodes -l "$KWOK_LABEL" -o name | wc -l)
  if ((have > n)); then  # a larger set from before: down to n
    local node
    for node in $(kubectl_ get nodes -l "$KWOK_LABEL" -o name | sort -V | tail -n $((have - n))); do
      kubectl_ delete "$node" --wait=false >/dev/null
    done
  fi
  log "making $n fake nodes"
  nodes_yaml "$n" | kubectl_ apply --server-side --force-conflicts -f - >/dev/null
  local deadline=$((SECONDS + 120 + n / 5)) ready
  until (( (ready = $(ready_count)) >= n )); do
    ((SECONDS < deadline)) || { log_tail kwok 40; die "only $ready of $n kwok nodes Ready"; }
    daemon_alive kwok || { log_tail kwok 40; die "kwok exited"; }
    sleep 1
  done
  log "$n kwok nodes Ready"
}

down() {
  if [[ -f $ETC/admin.kubeconfig ]] && kubectl_ get --raw /readyz >/dev/null 2>&1; then
    local pods
    # Pods still bound to a fake node (a test that did not clean up): gone with it, at once.
    pods=$(kubectl_ get pods -A -o jsonpath='{range .items[?(@.spec.nodeName)]}{.metadata.namespace}{" "}{.metadata.name}{" "}{.spec.nodeName}{"\n"}{end}' |
      awk '$3 ~ /^kwok-node-/')
    if [[ -n $pods ]]; then
      log "deleting $(wc -l <<<"$pods") pod(s) left on kwok nodes"
      local ns
      for ns in $(awk '{print $1}' <<<"$pods" | sort -u); do  # 200 pods a request
        awk -v ns="$ns" '$1 == ns {print $2}' <<<"$pods" |
          xargs -r -n 200 "$KUBECTL" --kubeconfig "$ETC/admin.kubeconfig" -n "$ns" delete pod \
            --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
      done
    fi
    if [[ -n $(kubectl_ get nodes -l "$KWOK_LABEL" -o name) ]]; then
      log "deleting the kwok nodes"
      kubectl_ delete nodes -l "$KWOK_LABEL" --wait=true --timeout=300s >/dev/null
    fi
  fi
  stop_daemon kwok
}

status() {
  local running=no
  daemon_alive kwok && running=yes
  printf 'kwok running: %s; kwok nodes Ready: %s\n' "$running" "$(ready_count)"
}

case ${1:-} in
  up) up "${2:-}" ;;
  down) down ;;
  status) status ;;
  *) echo "usage: kwok.sh up N | down | status" >&2; exit 2 ;;
esac
