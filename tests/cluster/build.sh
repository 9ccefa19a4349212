#!/usr/bin/env bash
# Builds (once, cached by version) every Go component of the test cluster:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl,
# etcd, CoreDNS, the Kubeflow training operator, Kueue, the JobSet controller,
# Kubeflow Trainer v2, kwok (the scale tests' fake nodes), crictl and kdist-initwait.
# Idempotent: a binary that already exists for the pinned version is not
# rebuilt. Usage: build.sh [COMPONENT...]   (default: all of them)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=kueue.sh
source "$here/kueue.sh"

CACHE=${KDIST_CACHE:-$HOME/.cache/kdist}
export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
BIN=$CACHE/bin
mkdir -p "$BIN" "$CACHE/src"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
command -v go >/dev/null || { log "ERROR: no Go toolchain (go) on PATH; install Go >= 1.24"; exit 1; }

# Each component gets its own wrapper module: their k8s.io versions differ.
wrapper() {  # wrapper NAME -> prints a fresh module dir
  local dir=$CACHE/src/$1
  mkdir -p "$dir"
  printf 'module kdist.local/%s\n\ngo 1.24\n' "$1" > "$dir/go.mod"
  printf '%s' "$dir"
}

build_kubernetes() {
  local out=$BIN/kubernetes-$K8S_VERSION
  local comps=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
  local missing=() c
  for c in "${comps[@]}"; do [[ -x $out/$c ]] || missing+=("$c"); done
  ((${#missing[@]})) || { log "kubernetes $K8S_VERSION cached"; return; }
  log "building ${missing[*]} $K8S_VERSION (cold: 10-25 min on 2 cores)"
  local dir=$CACHE/src/kubernetes
  grep -q "k8s.io/kubernetes $K8S_VERSION" "$dir/go.mod" 2>/dev/null || k8s_wrapper "${comps[@]}"
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  local v=k8s.io/component-base/version
  ld+=" -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  mkdir -p "$out"
  for c in "${missing[@]}"; do
    log "go build $c"
    (cd "$dir" && go build -trimpath -ldflags "$ld" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$out/$c.tmp" "$out/$c"
  done
}

# The wrapper module for k8s.io/kubernetes: every staging module its go.mod
# requires at v0.0.0 (about 31) is replaced by its published tag, derived
# from that go.mod rather than hard-coded.
k8s_wrapper() {  # k8s_wrapper CMD...
  local dir; dir=$(wrapper kubernetes)
  local modinfo gomod
  modinfo=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION")
  gomod=$(printf '%s' "$modinfo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  (
    cd "$dir"
    go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
    local m c
    for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
      go mod edit -replace="$m=$m@$K8S_STAGING_VERSION"
    done
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for c in "$@"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
      printf ')\n'
    } > tools.go
    go mod tidy -e >/dev/null 2>&1 || true
  )
}

# The operator's worker init container binary (see initwait/main.go); named
# by its source's hash so a change gets a new image tag.
build_initwait() {
  local sum; sum=$(sha256sum "$here/initwait/main.go" | cut -c1-12)
  local out=$BIN/kdist-initwait-$sum
  [[ -x $out ]] && { log "kdist-initwait $sum cached"; return; }
  log "building kdist-initwait $sum"
  local dir; dir=$(wrapper initwait)
  cp "$here/initwait/main.go" "$dir/"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$out.tmp" .)
  mv "$out.tmp" "$out"
}

# A module whose go.mod has no replace directives, built with `go get` so that the wrapper's
# go line follows the module's own minimum (JobSet and kwok: go 1.26.0). Its commit (from
# the module proxy's Origin) goes into the version ldflags the caller names.
build_goget() {  # build_goget NAME MODULE VERSION PACKAGE [LDFLAGS_WITH_@COMMIT@]
  local name=$1 module=$2 version=$3 pkg=$4 ldv=${5:-}
  local out=$BIN/$name-$version
  [[ -x $out ]] && { log "$name $version cached"; return; }
  log "building $name $version"
  local dir=$CACHE/src/$name commit
  mkdir -p "$dir"
  commit=$(go mod download -json "$module@$version" |
    python3 -c 'import json,sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash", "unknown"))')
  local ld="-s -w ${ldv//@COMMIT@/$commit}"
  (
    cd "$dir"
    printf 'module kdist.local/%s\n\ngo 1.24\n' "$name" > go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > tools.go
    go get "$module@$version" >/dev/null
    go mod tidy -e >/dev/null 2>&1 || true
    go build -trimpath -ldflags "$ld" -o "$out.tmp" "$pkg"
  )
  mv "$out.tmp" "$out"
}

# The JobSet controller (sigs.k8s.io/jobset, JOBSET_VERSION): its main package
# is the module root.
build_jobset() {
  local module=sigs.k8s.io/jobset
  build_goget jobset "$module" "$JOBSET_VERSION" "$module" \
    "-X $module/pkg/version.GitVersion=$JOBSET_VERSION -X $module/pkg/version.GitCommit=@COMMIT@"
}

# kwok (sigs.k8s.io/kwok, KWOK_VERSION): fake nodes and pods for the scale tests
# (tests/cluster/kwok.sh). Its version is a constant of its module; nothing to set.
build_kwok() {
  build_goget kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
}

# Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2, TRAINER_VERSION): its controller
# manager (cmd/trainer-controller-manager); it builds on JobSet v0.12.0, this cluster's.
build_trainer() {
  build_goget trainer github.com/kubeflow/trainer/v2 "$TRAINER_VERSION" \
    github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
}

build_simple() {  # build_simple NAME MODULE VERSION PACKAGE
  local name=$1 module=$2 version=$3 pkg=$4
  local out=$BIN/$name-$version
  [[ -x $out ]] && { log "$name $version cached"; return; }
  log "building $name $version"
  local dir; dir=$(wrapper "$name")
  (
    cd "$dir"
    printf 'package tools\n\nimport _ "%s"\n' "$pkg" > tools.go
    sed -i '1i //go:build tools\n' tools.go
    go mod edit -require="$module@$version"
    go mod tidy -e >/dev/null 2>&1 || true
    go build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg"
  )
  mv "$out.tmp" "$out"
}

want=${*:-etcd coredns operator kueue jobset trainer kwok crictl initwait kubernetes}
for what in $want; do
  case $what in
    kubernetes) build_kubernetes ;;
    etcd) build_simple etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3 ;;
    coredns) build_simple coredns github.com/coredns/coredns "$COREDNS_VERSION" github.com/coredns/coredns ;;
    operator) build_simple training-operator github.com/kubeflow/training-operator "$TRAINING_OPERATOR_VERSION" \
      github.com/kubeflow/training-operator/cmd/training-operator.v1 ;;
    kueue) build_kueue ;;
    jobset) build_jobset ;;
    trainer) build_trainer ;;
    kwok) build_kwok ;;
    crictl) build_simple crictl sigs.k8s.io/cri-tools "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl ;;
    initwait) build_initwait ;;
    *) echo "build.sh: unknown component $what" >&2; exit 2 ;;
  esac
done
log "done: $(ls "$BIN" | tr '\n' ' ')"
