# Configuration files of the cluster's components (sourced by up.sh after
# lib.sh). A pure function of lib.sh, so re-running up.sh rewrites nothing.

# Pods get addresses on kbr0 and routes to the pod and service ranges only:
# no default route and no masquerading, so a pod cannot reach anything
# outside this machine. isGateway stays false: the bridge already carries
# HOST_IP (up.sh sets it) and nothing needs the host to forward packets.
write_cni_config() {
  mkdir -p "$ETC/cni" "$STATE/cni"
  put "$ETC/cni/10-kdist.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "kdist-pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$HOST_IP", "rangeStart": "10.244.0.10"}]],
        "routes": [{"dst": "$POD_NET"}, {"dst": "$SVC_NET"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

write_containerd_config() {
  mkdir -p "$CTR_ROOT" "$CTR_STATE"
  put "$ETC/containerd.toml" <<TOML
version = 2
root = "$CTR_ROOT"
state = "$CTR_STATE"
# CAP_SYS_RESOURCE is missing: nothing may lower an oom_score_adj.
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$CTR_SOCK"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$CTR_ROOT/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$ETC/cni"
    max_conf_num = 1
TOML
}

# K8S_FEATURE_GATES (versions.env) as a YAML map, one gate a line.
feature_gates_yaml() {  # feature_gates_yaml INDENT
  local gate
  for gate in ${K8S_FEATURE_GATES//,/ }; do printf '%s%s: %s\n' "$1" "${gate%%=*}" "${gate#*=}"; done
}

write_kubelet_config() {
  put "$ETC/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $HOST_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
containerRuntimeEndpoint: "unix://$CTR_SOCK"
imageServiceEndpoint: "unix://$CTR_SOCK"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# No CAP_SYS_RESOURCE: the kubelet must not lower its own oom_score_adj.
oomScoreAdj: 0
maxOpenFiles: 20000
clusterDNS: [$HOST_IP]
clusterDomain: cluster.local
resolvConf: ""
podCIDR: $POD_SUBNET
podLogsDir: "$STATE/pod-logs"
# Imported images are not pinned: image GC would delete them for good.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A full-ish disk must not evict the test pods.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
evictionPressureTransitionPeriod: 30s
serializeImagePulls: false
registerNode: true
protectKernelDefaults: false
containerLogMaxSize: 20Mi
shutdownGracePeriod: 0s
featureGates:
$(feature_gates_yaml "  ")
YAML
}

# CoreDNS answers cluster.local (and reverse zones) from the API and NXDOMAIN
# for every other name at once: it never forwards out of the machine.
write_corefile() {
  put "$ETC/Corefile" <<COREFILE
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $HOST_IP
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $ETC/coredns.kubeconfig kdist
        ttl 5
    }
}
.:53 {
    bind $HOST_IP
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
COREFILE
}

# The operator's worker init container, as its own template file so that it
# passes Pod Security "restricted" (the built-in one sets no securityContext)
# and uses our static DNS waiter instead of busybox nslookup (see README).
write_init_container_template() {
  put "$ETC/pytorch-init-container.yaml" <<'YAML'
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  securityContext:
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile:
      type: RuntimeDefault
  command: ["/kdist-initwait", "{{.MasterAddr}}", "{{.MaxTries}}"]
YAML
}

write_configs() {
  mkdir -p "$ETC"
  write_cni_config
  write_containerd_config
  write_kubelet_config
  write_corefile
  write_init_container_template
}
