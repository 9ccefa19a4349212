# Fake GPU capacity for the test node (sourced by up.sh after lib.sh).
#
# The node advertises FAKE_GPUS of nvidia.com/gpu as an extended resource,
# the documented way (a patch of the node's status capacity; the kubelet then
# copies it into allocatable and keeps it on its status updates). So e2e jobs
# with resources.gpus are scheduled by GPU count, and a job asking for more
# than the node has stays Pending (FailedScheduling), on the CPU image: no
# device plugin, so no device is mounted; the containers see no GPU.
FAKE_GPUS=4
GPU_RESOURCE=nvidia.com/gpu

node_gpus() {  # node_gpus capacity|allocatable -> the node's count, or nothing
  kubectl_ get node "$NODE_NAME" -o "jsonpath={.status.$1.nvidia\.com/gpu}"
}

advertise_fake_gpus() {
  if [[ $(node_gpus capacity) != "$FAKE_GPUS" ]]; then
    log "advertising $FAKE_GPUS $GPU_RESOURCE on node $NODE_NAME (fake: no device behind them)"
    # JSON patch: "/" in the resource name is escaped as "~1".
    kubectl_ patch node "$NODE_NAME" --subresource=status --type=json \
      -p "[{\"op\": \"add\", \"path\": \"/status/capacity/${GPU_RESOURCE/\//~1}\", \"value\": \"$FAKE_GPUS\"}]" \
      >/dev/null
  fi
  wait_for "node $NODE_NAME to have $FAKE_GPUS $GPU_RESOURCE allocatable" 60 kubelet \
    node_gpus_are allocatable "$FAKE_GPUS"
}

node_gpus_are() { [[ $(node_gpus "$1") == "$2" ]]; }
