#!/usr/bin/env bash
# Brings up (or checks and repairs) a 2-node kind cluster, fully offline:
# kind and its node image built here (no registry is reachable), its own
# dockerd, Services through kube-proxy, CoreDNS that never forwards, the
# Kubeflow training operator in the cluster and the training image loaded
# into both nodes. Idempotent: a healthy cluster is reused in seconds.
# Writes .cluster-kind/kubeconfig. See README.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=../configs.sh
source "$CLUSTER_SRC/configs.sh"   # write_init_container_template (the operator's)
LOG_TAG=kind-up
START=$SECONDS

KIND_MODULE=$CACHE/go/mod/sigs.k8s.io/kind@$KIND_VERSION
OPERATOR_MODULE=$CACHE/go/mod/github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION
INITWAIT_BIN=$BIN/kdist-initwait-$(sha256sum "$INITWAIT_SRC" | cut -c1-12)
INITWAIT_IMAGE=kdist-initwait:${INITWAIT_BIN##*-}
OPERATOR_IMAGE=kdist-training-operator:$TRAINING_OPERATOR_VERSION
ETCD_TAG=${ETCD_VERSION#v}-0
# What kind's base image installs from apt, less what is not used here
# (fuse-overlayfs, NFS and iSCSI clients), plus Debian's containerd, runc and
# CNI plugins in place of the ones kind downloads from their source hosts.
BASE_PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,containerd,runc,containernetworking-plugins
HARNESS_BINARIES=("$K8S_BIN/kube-apiserver" "$K8S_BIN/kube-controller-manager" "$K8S_BIN/kube-scheduler"
  "$K8S_BIN/kubelet" "$KUBECTL" "$BIN/etcd-$ETCD_VERSION" "$BIN/coredns-$COREDNS_VERSION"
  "$BIN/training-operator-$TRAINING_OPERATOR_VERSION" "$BIN/crictl-$CRICTL_VERSION" "$INITWAIT_BIN")

preflight() {
  require_root
  mkdir -p "$LOGS" "$RUN/empty" "$ETC" "$SHARED" "$KIND_CACHE"
  chmod 1777 "$SHARED"   # pods run as UID 1000; hostPath volumes get no fsGroup
  ensure_packages docker.io debootstrap jq iproute2 gcc libc6-dev
  check_ranges
}

# The nodes' network and kind's pod and service ranges must not meet any
# route or address of this machine but the nodes' bridge.
check_ranges() {
  local conflicts
  conflicts=$({ ip -4 -o route show table all; ip -4 -o addr show; } | python3 -c '
import ipaddress, sys
bridge, ours = sys.argv[1], [ipaddress.ip_network(n) for n in sys.argv[2:]]
for line in sys.stdin:
    f = line.split()
    if f[0] in ("default", "unreachable", "local", "broadcast") or f"dev {bridge} " in line + " ":
        continue
    dst = f[3] if f[2] == "inet" else f[0]
    if f[2] == "inet" and f[1] == bridge:
        continue
    try:
        net = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        continue
    if any(net.overlaps(o) for o in ours):
        print(line.strip())
' "$NODE_BRIDGE" "$NODE_NET" "$KIND_POD_NET" "$KIND_SVC_NET")
  [[ -z $conflicts ]] || die "routes or addresses overlap $NODE_NET, $KIND_POD_NET or $KIND_SVC_NET: $conflicts"
}

# --- binaries ------------------------------------------------------------------

# The single-node harness builds most binaries (tests/cluster/build.sh). Never
# run a second build of them while one is under way: wait for it instead.
harness_binaries() {
  harness_built && return 0
  if pgrep -f "$CLUSTER_SRC/build.sh" >/dev/null; then
    log "waiting for the running tests/cluster/build.sh to finish"
    while pgrep -f "$CLUSTER_SRC/build.sh" >/dev/null; do sleep 10; done
    harness_built && return 0
  fi
  log "building the harness's binaries (log: $LOGS/build.log)"
  bash "$CLUSTER_SRC/build.sh" >>"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; die "build.sh failed"; }
}

harness_built() {
  local b
  for b in "${HARNESS_BINARIES[@]}"; do [[ -x $b ]] || return 1; done
}

go_env() {
  export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
  export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
}

build_kind() {
  [[ -x $KIND_BIN && -d $KIND_MODULE/images/base/files ]] && return 0
  log "building kind $KIND_VERSION (log: $LOGS/build.log)"
  (go_env; GOBIN=$KIND_CACHE/gobin go install "sigs.k8s.io/kind@$KIND_VERSION") >>"$LOGS/build.log" 2>&1 ||
    { tail -20 "$LOGS/build.log"; die "building kind failed"; }
  mkdir -p "$BIN"   # a cold machine: kind may be the first binary built
  mv "$KIND_CACHE/gobin/kind" "$KIND_BIN"
}

# kubeadm and kube-proxy, which the single-node harness does not need: the
# same wrapper module as tests/cluster/build.sh (every staging module
# replaced by its published tag, derived from k8s.io/kubernetes's go.mod) in a
# directory of its own, sharing the Go caches so most packages are built already.
build_k8s_extras() {
  local comps=(kubeadm kube-proxy) missing=() c
  for c in "${comps[@]}"; do [[ -x $K8S_BIN/$c ]] || missing+=("$c"); done
  ((${#missing[@]})) || return 0
  log "building ${missing[*]} $K8S_VERSION (log: $LOGS/build.log)"
  local dir=$KIND_CACHE/src/kubernetes
  (
    go_env
    if ! grep -q "k8s.io/kubernetes $K8S_VERSION" "$dir/go.mod" 2>/dev/null; then
      mkdir -p "$dir" && cd "$dir"
      printf 'module kdist.local/kind-kubernetes\n\ngo 1.24\n' > go.mod
      local gomod m
      gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .GoMod)
      go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
      for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
        go mod edit -replace="$m=$m@$K8S_STAGING_VERSION"
      done
      {
        printf '//go:build tools\n\npackage tools\n\nimport (\n'
        for c in "${comps[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
        printf ')\n'
      } > tools.go
      go mod tidy -e >/dev/null 2>&1 || true
    fi
    cd "$dir"
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local v=k8s.io/component-base/version
    local ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
    for c in "${missing[@]}"; do
      go build -trimpath -ldflags "$ld" -o "$K8S_BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c"
      mv "$K8S_BIN/$c.tmp" "$K8S_BIN/$c"
    done
  ) >>"$LOGS/build.log" 2>&1 || { tail -20 "$LOGS/build.log"; die "building ${missing[*]} failed"; }
}

# --- dockerd and the nodes' network ----------------------------------------------

start_dockerd() {
  dockerd_up && return 0
  if ! daemon_alive dockerd; then
    # The data root is shared by checkouts, one dockerd at a time: another
    # checkout's kind cluster (a CI clone's, say) is running.
    local other
    other=$(pgrep -a -f -- "--data-root $DOCKER_ROOT( |\$)" | grep -o -- '--host unix://[^ ]*' | head -1 || true)
    [[ -z $other ]] || die "another checkout's kind cluster is running (its dockerd: ${other#--host }); stop it with that checkout's tests/cluster/kind/down.sh, or use its .cluster-kind/kubeconfig"
    log "starting kind's dockerd (data in $DOCKER_ROOT)"
    mkdir -p "$DOCKER_ROOT" "$RUN/docker-exec"
    # runc-wrapper drops CAP_SYS_RESOURCE, which this machine cannot grant:
    # without it every `docker run --privileged` (a kind node) fails.
    put "$ETC/daemon.json" <<JSON
{"runtimes": {"kdist-runc": {"path": "$KIND_SRC/runc-wrapper"}}, "default-runtime": "kdist-runc"}
JSON
    # No iptables rules, no forwarding, no masquerading, no default bridge:
    # nothing this daemon runs may reach beyond this machine.
    start_daemon dockerd /usr/sbin/dockerd --config-file "$ETC/daemon.json" \
      --host "unix://$DOCKER_SOCK" --data-root "$DOCKER_ROOT" --exec-root "$RUN/docker-exec" \
      --pidfile "$RUN/docker-exec/dockerd.pid" \
      --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
      --storage-driver=overlay2 --exec-opt native.cgroupdriver=cgroupfs
  fi
  wait_for "kind's dockerd" 60 dockerd docker_ info
}

ensure_node_network() {
  if ! docker_ network inspect "$NODE_NET_NAME" >/dev/null 2>&1; then
    log "creating Docker network $NODE_NET_NAME ($NODE_NET, bridge $NODE_BRIDGE)"
    docker_ network create --driver bridge --subnet "$NODE_NET" --gateway "$NODE_GW" \
      -o "com.docker.network.bridge.name=$NODE_BRIDGE" \
      -o com.docker.network.bridge.enable_ip_masquerade=false "$NODE_NET_NAME" >/dev/null
  fi
  # Nodes have no default route (kdist-node-net removes it at boot), and this
  # machine does not forward; should either change, packets from the nodes
  # to anywhere but this machine still end here, answered "unreachable".
  ip route replace unreachable default table "$ISOLATION_TABLE"
  [[ -n $(ip rule show pref "$ISOLATION_PRIORITY") ]] ||
    ip rule add iif "$NODE_BRIDGE" lookup "$ISOLATION_TABLE" priority "$ISOLATION_PRIORITY"
}

# --- images --------------------------------------------------------------------

# kind's base image, made the way its images/base/Dockerfile does, from a
# debootstrapped Debian (cached as a tarball) instead of packages and
# release tarballs fetched from their source hosts.
ensure_base_image() {
  local key; key=$(printf '%s\n' bookworm "$BASE_PACKAGES" "$KIND_VERSION" | sha256sum | cut -c1-12)
  BASE_IMAGE=kdist-kind-base:bookworm-$key
  docker_ image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  local tarball=$KIND_CACHE/base-bookworm-$key.tar
  if [[ ! -f $tarball ]]; then
    local root=$STATE/build/base-rootfs t0=$SECONDS
    log "debootstrapping the node base (log: $LOGS/debootstrap.log)"
    rm -rf "$root"; mkdir -p "$root"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$root" \
      http://deb.debian.org/debian >>"$LOGS/debootstrap.log" 2>&1 ||
      { tail -20 "$LOGS/debootstrap.log"; die "debootstrap failed"; }
    setup_base_rootfs "$root"
    tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    log "node base rootfs made in $((SECONDS - t0))s"
  fi
  log "importing $BASE_IMAGE"
  docker_ import "$tarball" "$BASE_IMAGE-rootfs" >/dev/null
  # The metadata of kind's base image (`docker import` cannot set STOPSIGNAL:
  # systemd shuts down on SIGRTMIN+3, not SIGTERM).
  printf '%s\n' "FROM $BASE_IMAGE-rootfs" 'ENV container=docker' 'STOPSIGNAL SIGRTMIN+3' \
    'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' |
    DOCKER_BUILDKIT=0 docker_ build -q -t "$BASE_IMAGE" - >/dev/null
  docker_ rmi "$BASE_IMAGE-rootfs" >/dev/null
}

setup_base_rootfs() {  # the RUN steps of kind's images/base/Dockerfile, by hand
  local root=$1 files=$KIND_MODULE/images/base/files
  install -m 0755 "$files"/usr/local/bin/* "$root/usr/local/bin/"
  mkdir -p "$root/kind/bin" "$root/etc/containerd" "$root/etc/systemd/system/kubelet.service.d" \
    "$root/etc/kubernetes/manifests" "$root/opt/cni"
  install -m 0644 "$files"/kind/README.txt "$root/kind/"
  install -m 0755 "$files"/kind/bin/* "$root/kind/bin/"
  install -m 0644 "$files"/etc/crictl.yaml "$root/etc/"
  install -m 0644 "$files"/etc/containerd/config.toml "$root/etc/containerd/"
  install -m 0644 "$files"/etc/default/kubelet "$root/etc/default/"
  install -m 0644 "$files"/etc/sysctl.d/* "$root/etc/sysctl.d/"
  install -m 0644 "$files"/etc/systemd/system/*.service "$files"/etc/systemd/system/*.slice \
    "$root/etc/systemd/system/"
  install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$root/etc/systemd/system/kubelet.service.d/"
  (
    cd "$root"
    find lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
    rm -f lib/systemd/system/multi-user.target.wants/* etc/systemd/system/*.wants/* \
      lib/systemd/system/local-fs.target.wants/* lib/systemd/system/sockets.target.wants/*udev* \
      lib/systemd/system/sockets.target.wants/*initctl* lib/systemd/system/basic.target.wants/*
  )
  echo "ReadKMsg=no" >> "$root/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
  {
    chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
    chroot "$root" systemctl mask systemd-binfmt.service
  } >>"$LOGS/debootstrap.log" 2>&1
  # Debian's binaries where kind's units and containerd config expect theirs.
  ln -sf /usr/bin/containerd "$root/usr/local/bin/containerd"
  ln -sfn /usr/lib/cni "$root/opt/cni/bin"
  # The runtime spec template: containerd's default (the same 1.6 as here)
  # with kind's product-files hook and without rlimits.
  ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' > "$root/etc/containerd/cri-base.json"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/*.log \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
}

# One image archive per component, packed by the harness's mkimage.py under
# the names kubeadm asks for (etcd and CoreDNS at our pinned tags, set in the
# kubeadm config below).
make_component_archives() {  # make_component_archives DIR BUILD_CONTAINER
  local out=$1 build=$2 c
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    python3 "$CLUSTER_SRC/mkimage.py" --tag "registry.k8s.io/$c:$K8S_VERSION" --out "$out/$c.tar" \
      --entrypoint "/usr/local/bin/$c" "$K8S_BIN/$c:/usr/local/bin/$c"
  done
  python3 "$CLUSTER_SRC/mkimage.py" --tag "registry.k8s.io/etcd:$ETCD_TAG" --out "$out/etcd.tar" \
    --entrypoint /usr/local/bin/etcd "$BIN/etcd-$ETCD_VERSION:/usr/local/bin/etcd"
  python3 "$CLUSTER_SRC/mkimage.py" --tag "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" \
    --out "$out/coredns.tar" --entrypoint /coredns "$BIN/coredns-$COREDNS_VERSION:/coredns"
  gcc -Os -static -o "$out/pause" "$CLUSTER_SRC/pause/pause.c" && strip "$out/pause"
  python3 "$CLUSTER_SRC/mkimage.py" --tag "$PAUSE_IMAGE" --out "$out/pause.tar" \
    --entrypoint /pause --user 65535:65535 "$out/pause:/pause"
  python3 "$CLUSTER_SRC/mkimage.py" --tag "$INITWAIT_IMAGE" --out "$out/initwait.tar" \
    --entrypoint /kdist-initwait --user 65532:65532 "$INITWAIT_BIN:/kdist-initwait"
  python3 "$CLUSTER_SRC/mkimage.py" --tag "$OPERATOR_IMAGE" --out "$out/operator.tar" \
    --entrypoint /manager --user 65532:65532 "$BIN/training-operator-$TRAINING_OPERATOR_VERSION:/manager"
  # kube-proxy (nftables mode) runs nft: the binary and its shared libraries
  # from the node base, found with ldd, go into its image beside kube-proxy.
  local root=$out/kube-proxy-root pairs=() f
  mkdir -p "$root"
  docker_ exec "$build" sh -c 'tar -chf - /usr/sbin/nft $(ldd /usr/sbin/nft | grep -o "/[^ ]*")' 2>/dev/null |
    tar -xf - -C "$root"
  while read -r f; do pairs+=("$root/$f:/$f"); done < <(cd "$root" && find . -type f | sed 's|^\./||')
  ((${#pairs[@]} > 2)) || die "could not collect nft and its libraries from the node base"
  python3 "$CLUSTER_SRC/mkimage.py" --tag "registry.k8s.io/kube-proxy:$K8S_VERSION" \
    --out "$out/kube-proxy.tar" --entrypoint /usr/local/bin/kube-proxy \
    "$K8S_BIN/kube-proxy:/usr/local/bin/kube-proxy" "${pairs[@]}"
}

# The node image, assembled by hand: `kind build node-image` needs `ctr info`
# (absent in containerd 1.6) and fetches images from registries.
ensure_node_image() {
  local key
  key=$(
    {
      echo "$BASE_IMAGE" "$K8S_VERSION" "$ETCD_VERSION" "$COREDNS_VERSION" "$PAUSE_IMAGE" \
        "$INITWAIT_IMAGE" "$OPERATOR_IMAGE" "$KIND_POD_NET" "$KIND_SVC_NET"
      cat "$KIND_SRC/runc-wrapper" "$KIND_SRC"/node/* "$CLUSTER_SRC/mkimage.py" "$CLUSTER_SRC/pause/pause.c"
      declare -f make_component_archives build_node_image
    } | sha256sum | cut -c1-12
  )
  NODE_IMAGE=kdist-kind-node:$K8S_VERSION-$key
  docker_ image inspect "$NODE_IMAGE" >/dev/null 2>&1 && return 0
  build_node_image
  # Older node images: ~1 GB each, dropped unless a node still runs one.
  local old
  for old in $(docker_ images --format '{{.Repository}}:{{.Tag}}' kdist-kind-node); do
    [[ $old == "$NODE_IMAGE" ]] || docker_ rmi "$old" >/dev/null 2>&1 || true
  done
}

build_node_image() {
  local t0=$SECONDS build=kdist-kind-build-$$ work=$STATE/build/node
  log "building node image $NODE_IMAGE"
  rm -rf "$work"; mkdir -p "$work"
  docker_ rm -f "$build" >/dev/null 2>&1 || true
  docker_ run -d --name "$build" --network none --entrypoint sleep "$BASE_IMAGE" infinity >/dev/null
  # shellcheck disable=SC2064
  trap "docker_ rm -f -v $build >/dev/null 2>&1 || true" EXIT
  local b
  for b in kubeadm kubelet kubectl; do docker_ cp "$K8S_BIN/$b" "$build:/usr/bin/$b"; done
  docker_ cp "$BIN/crictl-$CRICTL_VERSION" "$build:/usr/local/bin/crictl"
  docker_ cp "$KIND_SRC/runc-wrapper" "$build:/usr/local/bin/kdist-runc"
  docker_ cp "$KIND_SRC/node/kdist-node-net" "$build:/usr/local/bin/kdist-node-net"
  docker_ cp "$KIND_SRC/node/kdist-node-net.service" "$build:/etc/systemd/system/"
  docker_ exec "$build" mkdir -p /kind/manifests /kind/images /etc/kdist
  docker_ cp "$KIND_SRC/node/default-storage.yaml" "$build:/kind/manifests/default-storage.yaml"
  # Pod sandboxes ask for oom_score_adj -998, which nothing here may set:
  # containerd keeps every container at or above its own (0). Pods' runc is
  # the wrapper (CAP_SYS_RESOURCE, again; privileged pods such as kube-proxy).
  docker_ exec -i "$build" bash -euc '
    echo -n "$1" > /kind/version
    printf "POD_NET=%s\nSVC_NET=%s\n" "$2" "$3" > /etc/kdist/node-net.env
    chown root:root /usr/bin/kube* /usr/local/bin/*
    chmod 0755 /usr/bin/kube* /usr/local/bin/*
    chmod 0644 /etc/systemd/system/kdist-node-net.service /kind/manifests/default-storage.yaml
    ln -sf /etc/systemd/system/kdist-node-net.service /etc/systemd/system/multi-user.target.wants/
    sed -i -e "s/restrict_oom_score_adj = false/restrict_oom_score_adj = true/" \
      -e "s|^\( *\)SystemdCgroup = true|&\n\1BinaryName = \"/usr/local/bin/kdist-runc\"|" \
      /etc/containerd/config.toml
    grep -q "restrict_oom_score_adj = true" /etc/containerd/config.toml
    [[ $(grep -c kdist-runc /etc/containerd/config.toml) == 2 ]]
  ' _ "$K8S_VERSION" "$KIND_POD_NET" "$KIND_SVC_NET"
  make_component_archives "$work" "$build"
  local a
  for a in "$work"/*.tar; do docker_ cp "$a" "$build:/kind/images/"; done
  # Imported without unpacking (no overlay on overlay here); the CRI plugin
  # unpacks on first use in the running node, as for kind's own images.
  # (containerd 1.6 cannot pin them; kind turns the kubelet's image GC off.)
  local pause_default; pause_default=$(docker_ exec "$build" kubeadm config images list \
    --kubernetes-version "$K8S_VERSION" 2>/dev/null | grep /pause: || true)
  docker_ exec -i "$build" bash -euc '
    containerd >/var/log/containerd-build.log 2>&1 & pid=$!
    for i in $(seq 50); do [[ -S /run/containerd/containerd.sock ]] && break; sleep 0.2; done
    for a in /kind/images/*.tar; do
      ctr -n k8s.io images import --no-unpack --all-platforms "$a" >/dev/null
    done
    # kubeadm checks for its own default pause tag: the same image, a second name.
    if [[ -n $2 && $2 != "$1" ]]; then ctr -n k8s.io images tag "$1" "$2" >/dev/null; fi
    ctr -n k8s.io images ls -q
    kill $pid; wait $pid || true
    rm -rf /kind/images /var/log/containerd-build.log
  ' _ "$PAUSE_IMAGE" "$pause_default" > "$work/images.txt"
  log "node images: $(grep -v '^sha256:' "$work/images.txt" | tr '\n' ' ')"
  docker_ commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
    "$build" "$NODE_IMAGE" >/dev/null
  docker_ rm -f -v "$build" >/dev/null
  trap - EXIT
  rm -rf "$work"
  log "node image built in $((SECONDS - t0))s"
}

# --- the cluster ---------------------------------------------------------------

kind_config() {
  cat <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
featureGates:              # K8S_FEATURE_GATES (../versions.env): every component, both nodes
$(feature_gates_yaml "  ")
runtimeConfig:
  "${K8S_RUNTIME_CONFIG%%=*}": "${K8S_RUNTIME_CONFIG#*=}"
networking:
  disableDefaultCNI: true      # kindnetd cannot be built offline: kdist-node-net does its job
  kubeProxyMode: nftables      # its image carries nft only (no iptables)
  podSubnet: $KIND_POD_NET
  serviceSubnet: $KIND_SVC_NET
  apiServerAddress: 127.0.0.1
nodes:
- role: control-plane
  extraMounts: [{hostPath: "$SHARED", containerPath: "$SHARED"}]
  kubeadmConfigPatches:
  - |
    kind: InitConfiguration
    nodeRegistration:
      taints: []               # schedulable: the survivor when the worker is lost
- role: worker
  extraMounts: [{hostPath: "$SHARED", containerPath: "$SHARED"}]
kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  etcd:
    local:
      imageTag: "$ETCD_TAG"
  dns:
    imageTag: "$COREDNS_VERSION"
- |
  kind: KubeletConfiguration
  failCgroupV1: false
  oomScoreAdj: 0
YAML
}

node_running() { [[ $(docker_ inspect -f '{{.State.Running}}' "$1" 2>/dev/null) == true ]]; }

# Why the existing cluster cannot be reused (nothing when it can): the Docker
# data root is shared by checkouts, so the nodes found may be another
# checkout's, mounting its directories, or an older node image's.
stale_reason() {
  local n image mounts
  for n in "$CONTROL_PLANE" "$WORKER"; do
    docker_ inspect "$n" >/dev/null 2>&1 || { echo "node $n is gone"; return; }
  done
  image=$(docker_ inspect -f '{{.Config.Image}}' "$CONTROL_PLANE")
  [[ $image == "$NODE_IMAGE" ]] || { echo "it runs $image, not the current $NODE_IMAGE"; return; }
  mounts=$(docker_ inspect -f '{{range .Mounts}}{{.Source}} {{end}}' "$CONTROL_PLANE" "$WORKER")
  [[ $(grep -o -- "$SHARED " <<<"$mounts" | wc -l) == 2 ]] ||
    echo "another checkout made it (its nodes mount $(grep -o -- '[^ ]*/shared ' <<<"$mounts" | head -1)not $SHARED)"
}

ensure_cluster() {
  local why
  if kind_ get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    why=$(stale_reason)
    [[ -z $why ]] || { log "replacing kind cluster $CLUSTER_NAME: $why"; delete_kind_cluster; }
  fi
  if kind_ get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
    local n
    for n in "$CONTROL_PLANE" "$WORKER"; do
      node_running "$n" || { log "starting stopped node $n"; docker_ start "$n" >/dev/null; }
    done
  else
    kind_config > "$ETC/kind.yaml"
    log "creating kind cluster $CLUSTER_NAME (log: $LOGS/kind-create.log)"
    local t0=$SECONDS
    # --retain: a failed start keeps its nodes, so their logs can be printed.
    if ! kind_ create cluster --name "$CLUSTER_NAME" --image "$NODE_IMAGE" --config "$ETC/kind.yaml" \
      --kubeconfig "$KIND_KUBECONFIG" --retain -v 1 >>"$LOGS/kind-create.log" 2>&1; then
      tail -30 "$LOGS/kind-create.log"
      node_logs
      delete_kind_cluster
      die "kind create cluster failed (the nodes' logs above; kind's: $LOGS/kind-create.log)"
    fi
    log "kind create cluster took $((SECONDS - t0))s"
  fi
  kind_ get kubeconfig --name "$CLUSTER_NAME" > "$KIND_KUBECONFIG.tmp"
  mv "$KIND_KUBECONFIG.tmp" "$KIND_KUBECONFIG"
  ( wait_for "the API server" 120 dockerd kubectl_ get --raw /readyz ) ||
    { node_logs; die "the kind cluster's API server did not answer (the nodes' logs above)"; }
  node_net_credentials
  ( wait_for "both nodes Ready" 180 dockerd kubectl_ wait --for=condition=Ready --timeout=5s \
    node "$CONTROL_PLANE" "$WORKER" ) || { node_logs; die "the kind nodes did not become Ready (their logs above)"; }
}

# What each node's kubelet, containerd and network service last said, and its
# containers: printed when the cluster does not come up.
node_logs() {
  local n
  for n in "$CONTROL_PLANE" "$WORKER"; do
    docker_ inspect "$n" >/dev/null 2>&1 || { echo "--- node $n: no container" >&2; continue; }
    echo "--- node $n ($(docker_ inspect -f '{{.State.Status}}' "$n"))" >&2
    node_running "$n" || { docker_ logs --tail 30 "$n" >&2 2>&1 || true; continue; }
    local unit
    for unit in kubelet containerd kdist-node-net; do
      echo "--- $n: journalctl -u $unit (last 25 lines)" >&2
      node_exec "$n" journalctl -u "$unit" --no-pager -n 25 >&2 2>&1 || true
    done
    echo "--- $n: crictl ps -a" >&2
    node_exec "$n" crictl ps -a >&2 2>&1 || true
  done
}

# kdist-node-net in each node follows every Node object; a node's own
# credentials may read only its own. A ServiceAccount that may read Nodes,
# with a long-lived token, written into each node as a kubeconfig.
node_net_credentials() {
  kubectl_ apply -f - >>"$LOGS/apply.log" <<'YAML'
apiVersion: v1
kind: ServiceAccount
metadata: {name: kdist-node-net, namespace: kube-system}
---
apiVersion: v1
kind: Secret
type: kubernetes.io/service-account-token
metadata:
  name: kdist-node-net-token
  namespace: kube-system
  annotations: {kubernetes.io/service-account.name: kdist-node-net}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kdist-node-net}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kdist-node-net}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kdist-node-net}
subjects:
- {kind: ServiceAccount, name: kdist-node-net, namespace: kube-system}
YAML
  local get=(kubectl_ -n kube-system get secret kdist-node-net-token -o)
  wait_for "the node-net token" 60 dockerd node_net_token_issued
  local token ca kc=$ETC/node-net.kubeconfig n
  token=$("${get[@]}" jsonpath='{.data.token}' | base64 -d)
  ca=$("${get[@]}" jsonpath='{.data.ca\.crt}')
  cat > "$kc" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: kind
  cluster: {server: "https://$CONTROL_PLANE:6443", certificate-authority-data: "$ca"}
users:
- name: kdist-node-net
  user: {token: "$token"}
contexts:
- name: kdist-node-net
  context: {cluster: kind, user: kdist-node-net}
current-context: kdist-node-net
YAML
  for n in "$CONTROL_PLANE" "$WORKER"; do
    node_exec "$n" test -s /etc/kdist/node-net.kubeconfig && continue
    docker_ exec -i "$n" sh -c 'umask 077; cat > /etc/kdist/node-net.kubeconfig' < "$kc"
  done
  rm -f "$kc"
}

node_net_token_issued() {
  [[ -n $(kubectl_ -n kube-system get secret kdist-node-net-token -o jsonpath='{.data.token}') ]]
}

# CoreDNS as kubeadm installs it forwards other names to the node's resolver;
# here it answers cluster.local and answers NXDOMAIN for everything else at
# once, like the single-node harness. It runs on the control plane, the node
# a node-loss drill never stops.
configure_dns() {
  local corefile='cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        ttl 5
    }
    loadbalance
}
.:53 {
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
'
  local current; current=$(kubectl_ -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}')
  if [[ $current != "${corefile%$'\n'}" ]]; then
    log "configuring CoreDNS (no forwarding; on the control plane)"
    kubectl_ -n kube-system create configmap coredns --from-literal=Corefile="$corefile" \
      --dry-run=client -o yaml | kubectl_ apply -f - >>"$LOGS/apply.log" 2>&1
    kubectl_ -n kube-system patch deployment coredns --type merge -p \
      '{"spec": {"template": {"spec": {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}}}}' \
      >>"$LOGS/apply.log"
    kubectl_ -n kube-system rollout restart deployment coredns >>"$LOGS/apply.log"
  fi
  wait_for "CoreDNS" 120 dockerd kubectl_ -n kube-system rollout status deployment coredns --timeout=5s
}

# The operator runs in the cluster, as users run it: the upstream
# kustomization with a locally packed image, PyTorchJob only, the
# restricted-compliant init container of the single-node harness, on the
# control plane (it must outlive the worker in the drills).
install_operator() {
  local dir=$ETC/operator
  rm -rf "$dir"; mkdir -p "$dir"
  cp -r "$OPERATOR_MODULE/manifests" "$dir/upstream"; chmod -R u+w "$dir/upstream"
  ETC=$dir write_init_container_template
  cat > "$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: kubeflow
resources:
- upstream/overlays/standalone
images:
- name: ghcr.io/kubeflow/training-v1/training-operator
  newName: docker.io/library/${OPERATOR_IMAGE%%:*}
  newTag: ${OPERATOR_IMAGE##*:}
configMapGenerator:
- name: kdist-pytorch-init-container
  files: [pytorch-init-container.yaml]
patches:
- target: {kind: Deployment, name: training-operator}
  patch: |
    - op: add
      path: /spec/template/spec/containers/0/args
      value:
      - --enable-scheme=pytorchjob
      - --pytorch-init-container-image=$INITWAIT_IMAGE
      - --pytorch-init-container-template-file=/etc/kdist/pytorch-init-container.yaml
    - op: add
      path: /spec/template/spec/containers/0/volumeMounts/-
      value: {name: init-container-template, mountPath: /etc/kdist, readOnly: true}
    - op: add
      path: /spec/template/spec/volumes/-
      value: {name: init-container-template, configMap: {name: kdist-pytorch-init-container}}
    - op: add
      path: /spec/template/spec/nodeSelector
      value: {node-role.kubernetes.io/control-plane: ""}
YAML
  kubectl_ kustomize "$dir" > "$dir/rendered.yaml"
  # Applied once per content (the CRDs are large): a warm run only checks it runs.
  local sum; sum=$(sha256sum < "$dir/rendered.yaml" | cut -c1-16)
  if [[ $(kubectl_ -n kubeflow get deployment training-operator \
          -o jsonpath='{.metadata.annotations.kdist\.dev/applied}' 2>/dev/null) != "$sum" ]]; then
    log "installing the training operator ($OPERATOR_IMAGE)"
    kubectl_ apply --server-side --force-conflicts -f "$dir/rendered.yaml" >>"$LOGS/apply.log" 2>&1 ||
      { tail -20 "$LOGS/apply.log"; die "installing the training operator failed"; }
    kubectl_ -n kubeflow annotate --overwrite deployment training-operator "kdist.dev/applied=$sum" \
      >>"$LOGS/apply.log"
  fi
  wait_for "the training operator" 180 dockerd \
    kubectl_ -n kubeflow rollout status deployment training-operator --timeout=5s
  wait_for "the PyTorchJob CRD" 60 dockerd \
    kubectl_ wait --for=condition=Established --timeout=5s crd/pytorchjobs.kubeflow.org
}

# --- the training image --------------------------------------------------------

node_image_id() {  # node_image_id NODE [IMAGE] -> the image ID of IMAGE (kdist-train:dev-cpu) there
  node_exec "$1" crictl inspecti -o go-template --template '{{.status.id}}' "${2:-$TRAIN_IMAGE}" 2>/dev/null || true
}

# The nodes' training image, built into kind's own Docker: Debian forky's torch
# (../image.sh --forky), unless KDIST_KIND_IMAGE_SOURCE names another Docker.
build_train_image() {
  [[ $IMAGE_SOURCE_SOCK == "$DOCKER_SOCK" ]] || return 0
  KDIST_IMAGE_DOCKER_SOCK=$DOCKER_SOCK bash "$CLUSTER_SRC/image.sh" --forky
}

# The training image and, where the source has it, the same without kdist
# (BARE_IMAGE: image.sh --forky builds both; its layers are the training
# image's, so one archive carries them once).
load_train_image() {
  local src=("$DOCKER_CLI" --host "unix://$IMAGE_SOURCE_SOCK") id n image missing=() images=() ids=()
  for image in "$TRAIN_IMAGE" "$BARE_IMAGE"; do
    id=$("${src[@]}" image inspect -f '{{.Id}}' "$image" 2>/dev/null) || continue
    images+=("$image"); ids+=("$id")
  done
  if [[ ${images[0]:-} != "$TRAIN_IMAGE" ]]; then
    log "WARNING: no $TRAIN_IMAGE at $IMAGE_SOURCE_SOCK; not loaded"
    return 0
  fi
  id=${ids[0]}
  local i
  for n in "$CONTROL_PLANE" "$WORKER"; do
    for i in "${!images[@]}"; do
      [[ $(node_image_id "$n" "${images[$i]}") == "${ids[$i]}" ]] || { missing+=("$n"); break; }
    done
  done
  ((${#missing[@]})) || return 0
  local t0=$SECONDS archive=$KIND_CACHE/train-image.tar
  log "loading ${images[*]} (${id:7:12}) into ${missing[*]}"
  "${src[@]}" save "${images[@]}" > "$archive.tmp" && mv "$archive.tmp" "$archive" ||
    { rm -f "$archive.tmp"; die "docker save ${images[*]} failed"; }
  log "saved in $((SECONDS - t0))s ($(du -h "$archive" | cut -f1)); kind load (log: $LOGS/kind-load.log)"
  kind_ load image-archive "$archive" --name "$CLUSTER_NAME" --nodes "$(IFS=,; echo "${missing[*]}")" \
    >>"$LOGS/kind-load.log" 2>&1 || { rm -f "$archive"; tail -20 "$LOGS/kind-load.log"; die "kind load failed"; }
  rm -f "$archive"
  for n in "${missing[@]}"; do
    for i in "${!images[@]}"; do
      [[ $(node_image_id "$n" "${images[$i]}") == "${ids[$i]}" ]] ||
        die "${images[$i]} on $n is not ${ids[$i]:7:12} after kind load"
    done
    # The layer blobs, once unpacked, are ~6 GB per node that nothing reads
    # again (kind's containerd discards them for pulled images the same way);
    # and the build the tag moved away from has no name left, only its GBs.
    node_exec "$n" bash -c '
      m=$(ctr -n k8s.io images ls "name==$1" | awk "NR == 2 {print \$3}")
      ctr -n k8s.io content get "$m" | jq -r ".layers[].digest" | xargs -r ctr -n k8s.io content rm >/dev/null 2>&1
      crictl images -o json | jq -r ".images[] | select(.repoTags == []) | .id" |
        xargs -r crictl rmi >/dev/null 2>&1 || true' _ "docker.io/library/$TRAIN_IMAGE"
  done
  log "$TRAIN_IMAGE loaded in $((SECONDS - t0))s"
}

# --build-only: every binary both clusters need (the harness's, kind, kubeadm,
# kube-proxy) and nothing else, no root needed; CI runs it while the CPU-light
# parts of the tests run (.ci/run).
build_only() {
  mkdir -p "$LOGS" "$KIND_CACHE"
  command -v jq >/dev/null || ensure_packages jq
  build_kind
  harness_binaries
  build_k8s_extras
  log "binaries of both clusters built in $((SECONDS - START))s"
}

main() {
  [[ ${1:-} == --build-only ]] && { build_only; return; }
  require_root
  take_lock
  preflight
  start_dockerd
  ensure_node_network
  build_kind
  ensure_base_image
  harness_binaries
  build_k8s_extras
  ensure_node_image
  ensure_cluster
  configure_dns
  install_operator
  build_train_image
  load_train_image
  log "Kubernetes $K8S_VERSION on 2 nodes, feature gates on: $K8S_FEATURE_GATES; runtime-config: $K8S_RUNTIME_CONFIG"
  log "kind cluster ready in $((SECONDS - START))s: KUBECONFIG=$KIND_KUBECONFIG"
}

main "$@"
