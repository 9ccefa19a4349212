#!/usr/bin/env bash
# Builds the CPU training image kdist-train:dev-cpu from image/Dockerfile and
# loads it into the test cluster's containerd. No registry is involved: the
# base is a local debootstrap of Debian bookworm (cached), the wheels come
# from $KDIST_CACHE/wheels (downloaded once), Docker runs locally.
# --forky builds the kind nodes' image instead (Debian forky's own CPU torch,
# see main below) into the Docker at $KDIST_IMAGE_DOCKER_SOCK.
# Cached by content: when the image in containerd already carries the hash of
# its inputs (image/, kdist/, pyproject.toml, this script, versions.env),
# nothing is done. Needs the cluster up (up.sh).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
LOG_TAG=image
START=$SECONDS

IMAGE=kdist-train:dev-cpu
IMAGE_REF=docker.io/library/$IMAGE
# Beside it, for spec.runtime shipped (tests/e2e/test_shipped_runtime.py): the same
# image without kdist (image/Dockerfile's bare target: no layer of its own), and that
# with a torch kdist does not support (2.3, a stand-in: tests/cluster/oldtorch.Dockerfile).
BARE_IMAGE=kdist-bare:dev-cpu
OLDTORCH_IMAGE=kdist-oldtorch:dev-cpu
EXTRA_IMAGES=()
HASH_LABEL=kdist.content-hash
DOCKER=/usr/bin/docker   # the CLI that ships with the daemon (docker.io 20.10)
WHEELS=$CACHE/wheels
BUILD=$STATE/image-build
SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python3-pip,ca-certificates
# The kdist wheel's extras and the wheels beside it: PyPI's torch (pinned) and numpy.
KDIST_EXTRAS=train
PIP_TARGET=()
FLAVOUR=pypi
KEEP_BUILD_CACHE=10GB
DOCKERFILE=${KDIST_DOCKERFILE:-$REPO/image/Dockerfile}

docker_() { "$DOCKER" --host "unix://$DOCKER_SOCK" "$@"; }

# The hash of everything the image is made of. The wheel set is a function
# of pyproject.toml and TORCH_VERSION, both hashed.
content_hash() {
  (
    cd "$REPO"
    find image kdist pyproject.toml README.md "$DOCKERFILE" \
      tests/cluster/image.sh tests/cluster/oldtorch.Dockerfile tests/cluster/versions.env -type f \
      ! -name '*.pyc' ! -path '*/__pycache__/*' 2>/dev/null | LC_ALL=C sort -u | xargs sha256sum || true
    echo "$FLAVOUR $SUITE $BASE_PACKAGES"
  ) | sha256sum | cut -c1-16
}

loaded_hash() {
  ctr_ images ls "name==$IMAGE_REF" 2>/dev/null | awk -v l="$HASH_LABEL=" 'NR > 1 {
    n = split($NF, kv, ","); for (i = 1; i <= n; i++) if (index(kv[i], l) == 1) print substr(kv[i], length(l) + 1) }'
}

# The config digest (= Docker's image ID) of an image containerd has.
image_id() {  # image_id [REF]
  local manifest
  manifest=$(ctr_ images ls "name==${1:-$IMAGE_REF}" 2>/dev/null | awk 'NR == 2 {print $3}')
  [[ -n $manifest ]] || return 0
  ctr_ content get "$manifest" | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["digest"])'
}

# The CRI plugin names images by ID too ("sha256:..."); such a name outlives
# the tag that moved on and pins the old image's GBs. Drop the stale ones.
prune_stale_ids() {
  local keep ref
  keep=$(for ref in $(ctr_ images ls -q | grep -v '^sha256:'); do image_id "$ref"; done)
  for ref in $(ctr_ images ls -q | grep -E '^sha256:[0-9a-f]{64}$'); do
    grep -qxF "$ref" <<<"$keep" || ctr_ images rm "$ref" >/dev/null
  done
}

start_dockerd() {
  docker_ info >/dev/null 2>&1 && return 0
  [[ $FLAVOUR == pypi ]] || die "no Docker answers at $DOCKER_SOCK (--forky builds into kind's: run tests/cluster/kind/up.sh)"
  daemon_alive dockerd || {
    log "starting dockerd (data in $DOCKER_ROOT)"
    mkdir -p "$DOCKER_ROOT" "$STATE/docker"
    # No iptables, no bridge, no forwarding: builds use the host network
    # (--network host) and no container gets a network of its own.
    start_daemon dockerd /usr/sbin/dockerd --host "unix://$DOCKER_SOCK" \
      --data-root "$DOCKER_ROOT" --exec-root "$STATE/docker/exec" \
      --pidfile "$STATE/docker/dockerd.pid" \
      --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
      --userland-proxy=false --storage-driver=overlay2 \
      --exec-opt native.cgroupdriver=cgroupfs
  }
  wait_for "dockerd" 60 dockerd docker_ info
}

# A Debian rootfs ($SUITE) with its python3, `docker import`ed once; the
# rootfs tarball is cached so a fresh Docker data root imports it again
# without a new debootstrap.
ensure_base() {
  local key; key=$(printf '%s\n' "$SUITE" minbase "$BASE_PACKAGES" | sha256sum | cut -c1-12)
  BASE_IMAGE=kdist-base:$SUITE-$key
  docker_ image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  local tarball=$CACHE/base/$BASE_IMAGE.tar
  tarball=${tarball/:/-}
  if [[ ! -f $tarball ]]; then
    log "debootstrapping Debian $SUITE into a base rootfs (log: $LOGS/debootstrap.log)"
    local root=$BUILD/rootfs
    rm -rf "$root"; mkdir -p "$root" "$CACHE/base"
    # This machine's debootstrap (bookworm's) has no script named forky: a
    # testing suite bootstraps as sid does.
    local script=(); [[ -e /usr/share/debootstrap/scripts/$SUITE ]] || script=(/usr/share/debootstrap/scripts/sid)
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$root" \
      http://deb.debian.org/debian "${script[@]}" >>"$LOGS/debootstrap.log" 2>&1 ||
      { tail -20 "$LOGS/debootstrap.log"; die "debootstrap failed"; }
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/* \
      "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
    tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  log "importing base image $BASE_IMAGE"
  docker_ import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$tarball" "$BASE_IMAGE" >/dev/null
}

# The kdist wheel plus every wheel it needs with torch (pinned) and numpy,
# resolved against the wheel cache without the network; only when that
# fails are the missing wheels downloaded into the cache.
collect_wheels() {
  local ctx=$1 kdist_dir=$BUILD/kdist-wheel src=$BUILD/src
  rm -rf "$kdist_dir" "$src"; mkdir -p "$kdist_dir" "$src" "$WHEELS" "$ctx/wheels"
  # Built from a copy: setuptools leaves build/ and *.egg-info behind.
  (cd "$REPO" && cp -r kdist pyproject.toml README.md "$src/")
  find "$src" -name __pycache__ -prune -exec rm -rf {} +
  # Fixed zip timestamps: the same code gives the same wheel, so Docker's
  # cache hits and an unchanged image is not imported again.
  export SOURCE_DATE_EPOCH=315532800
  (cd "$src" && pip wheel --quiet --no-deps --no-build-isolation -w "$kdist_dir" . 2>/dev/null) ||
    (cd "$src" && pip wheel --quiet --no-deps -w "$kdist_dir" .) >>"$LOGS/image-pip.log" 2>&1 ||
    die "building the kdist wheel failed; see $LOGS/image-pip.log"
  local whl; whl=$(ls "$kdist_dir"/kdist-*.whl)
  local reqs=("$whl[train]" "torch==$TORCH_VERSION" numpy)
  [[ $FLAVOUR == pypi ]] || reqs=("$whl")   # torch and numpy are the base's, Debian's
  if ! resolve_offline "${reqs[@]}"; then
    log "downloading missing wheels into $WHEELS"
    pip download --quiet -d "$WHEELS" --only-binary=:all: "${PIP_TARGET[@]}" "${reqs[@]}" >>"$LOGS/image-pip.log" 2>&1 ||
      die "pip download failed; see $LOGS/image-pip.log"
    resolve_offline "${reqs[@]}" || die "wheels still unresolved; see $LOGS/image-pip.log"
  fi
  # wheels/ gets the third-party wheels (they change only with
  # pyproject.toml or TORCH_VERSION), dist/ the kdist wheel (every code
  # change), so a Dockerfile can install them as two layers and a code change
  # rebuilds and reloads only the small one. A Dockerfile that does not use
  # dist/ finds the kdist wheel in wheels/ too.
  mkdir -p "$ctx/dist"
  cp "$whl" "$ctx/dist/"
  grep -qE '(^|[^k])dist/' "$DOCKERFILE" || cp "$whl" "$ctx/wheels/"
  local f
  while read -r f; do
    [[ $f == "$whl" ]] && continue
    ln -f "$f" "$ctx/wheels/" 2>/dev/null || cp "$f" "$ctx/wheels/"
  done < "$BUILD/wheels.txt"
}

resolve_offline() {
  local target=(); ((${#PIP_TARGET[@]})) && target=(--only-binary=:all: "${PIP_TARGET[@]}" --target "$BUILD/target")
  pip install --quiet --dry-run --ignore-installed --no-index --find-links "$WHEELS" \
    "${target[@]}" --report "$BUILD/report.json" "$@" >>"$LOGS/image-pip.log" 2>&1 || return 1
  python3 - "$BUILD/report.json" > "$BUILD/wheels.txt" <<'PY'
import json, sys, urllib.parse, urllib.request
for item in json.load(open(sys.argv[1]))["install"]:
    url = item["download_info"]["url"]
    print(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
PY
}

build_and_load() {
  local hash=$1 ctx=$BUILD/context
  rm -rf "$ctx"; mkdir -p "$ctx"
  collect_wheels "$ctx"
  log "docker build $IMAGE ($(du -sh --apparent-size "$ctx/wheels" | cut -f1) of wheels; log: $LOGS/image-build.log)"
  local t0=$SECONDS buildkit=0
  # RUN --mount (wheels bind-mounted, not copied into a layer) needs BuildKit.
  grep -q -- '--mount' "$DOCKERFILE" && buildkit=1
  DOCKER_BUILDKIT=$buildkit docker_ build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --build-arg "KDIST_EXTRAS=$KDIST_EXTRAS" "${BUILD_ARGS[@]}" \
    --label "$HASH_LABEL=$hash" -t "$IMAGE" -f "$DOCKERFILE" "$ctx" >>"$LOGS/image-build.log" 2>&1 ||
    { tail -30 "$LOGS/image-build.log"; die "docker build failed"; }
  local size; size=$(docker_ image inspect -f '{{.Size}}' "$IMAGE")
  log "built in $((SECONDS - t0))s; image size $((size / 1024 / 1024)) MiB"
  if [[ " ${EXTRA_IMAGES[*]} " == *" $BARE_IMAGE "* ]]; then
    # The same build up to the bare target: every layer is cached, nothing new is stored.
    DOCKER_BUILDKIT=$buildkit docker_ build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" \
      "${BUILD_ARGS[@]}" --target bare -t "$BARE_IMAGE" -f "$DOCKERFILE" "$ctx" \
      >>"$LOGS/image-build.log" 2>&1 || { tail -30 "$LOGS/image-build.log"; die "docker build $BARE_IMAGE failed"; }
    log "built $BARE_IMAGE beside it"
  fi
  if [[ " ${EXTRA_IMAGES[*]} " == *" $OLDTORCH_IMAGE "* ]]; then
    mkdir -p "$ctx/empty"
    docker_ build --network host --build-arg "BASE=$BARE_IMAGE" -t "$OLDTORCH_IMAGE" \
      -f "$REPO/tests/cluster/oldtorch.Dockerfile" "$ctx/empty" >>"$LOGS/image-build.log" 2>&1 ||
      { tail -30 "$LOGS/image-build.log"; die "docker build $OLDTORCH_IMAGE failed"; }
    log "built $OLDTORCH_IMAGE beside it"
  fi
  # Old builds' layers: keep Docker's cache to about one image's worth.
  docker_ image prune -f >/dev/null 2>&1 || true
  docker_ builder prune -f --keep-storage "$KEEP_BUILD_CACHE" >/dev/null 2>&1 || true
  [[ $DOCKER_ONLY == 1 ]] && { rm -rf "$ctx" "$BUILD/kdist-wheel" "$BUILD/src"; return 0; }
  t0=$SECONDS
  if all_imported "$IMAGE" "${EXTRA_IMAGES[@]}"; then
    log "containerd already has these very images; relabelling only"
  else
    log "importing into the cluster's containerd"
    # Seen once on a fresh cluster: the layers landed but unpacking them failed
    # ("parent snapshot ... does not exist"), leaving the kubelet to unpack at
    # the first pod's start. A second import unpacks again. One archive for all
    # the images: their shared layers travel once.
    if ! docker_ save "$IMAGE" "${EXTRA_IMAGES[@]}" | ctr_ images import - >/dev/null; then
      log "importing failed; once more"
      docker_ save "$IMAGE" "${EXTRA_IMAGES[@]}" | ctr_ images import - >/dev/null ||
        die "importing $IMAGE into containerd failed"
    fi
    log "imported in $((SECONDS - t0))s"
  fi
  ctr_ images label "$IMAGE_REF" "$HASH_LABEL=$hash" >/dev/null
  prune_stale_ids
  rm -rf "$ctx" "$BUILD/kdist-wheel" "$BUILD/src"
}

# Whether containerd holds each of these Docker images, by ID.
all_imported() {
  local image
  for image in "$@"; do
    [[ $(docker_ image inspect -f '{{.Id}}' "$image") == "$(image_id "docker.io/library/$image")" ]] || return 1
  done
}

# --unload: drop the image from the single-node cluster's containerd (its
# unpacked GBs), e.g. before a kind cluster loads its own copies from Docker.
unload() {
  daemon_alive containerd || return 0
  local image
  for image in "$IMAGE" "$BARE_IMAGE" "$OLDTORCH_IMAGE"; do  # the extras hold the same layers
    ctr_ images rm --sync "docker.io/library/$image" >/dev/null 2>&1 || true
  done
  prune_stale_ids
  log "$IMAGE (and its bare variants) unloaded from the single-node cluster's containerd"
}

# The hash label of the image in Docker (the source kind loads from).
docker_hash() {
  docker_ image inspect -f "{{index .Config.Labels \"$HASH_LABEL\"}}" "$IMAGE" 2>/dev/null || true
}

# The kind nodes' image: Debian forky's own torch (2.14, CPU-only, Python
# 3.14) is 1.4 GB where PyPI's CUDA build makes 5.7 GB, so two nodes' copies
# fit the disk beside the single-node cluster. Its torch has no libuv
# (USE_LIBUV=0: torch's classic TCPStore), and only kdist's own pure-Python
# dependencies come as wheels, cp314 ones, in a cache of their own.
forky() {
  FLAVOUR=forky SUITE=forky DOCKER_ONLY=1 KDIST_EXTRAS= KEEP_BUILD_CACHE=2GB
  BASE_PACKAGES+=,python3-torch,python3-numpy
  BUILD_ARGS=(--build-arg USE_LIBUV=0)
  WHEELS=$CACHE/wheels-forky
  PIP_TARGET=(--python-version 3.14 --implementation cp --platform manylinux_2_28_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
  DOCKER_SOCK=${KDIST_IMAGE_DOCKER_SOCK:?--forky builds into the Docker at KDIST_IMAGE_DOCKER_SOCK}
  BUILD=$STATE/image-build-forky
}

DOCKER_ONLY=0
BUILD_ARGS=()
main() {
  case ${1:-} in
    --unload) ;;
    --forky) EXTRA_IMAGES=("$BARE_IMAGE") ;;  # Debian's torch without kdist, for kind
    *) EXTRA_IMAGES=("$BARE_IMAGE" "$OLDTORCH_IMAGE") ;;
  esac
  require_root
  case ${1:-} in
    --unload) unload; return ;;
    --docker-only) DOCKER_ONLY=1 ;;   # build into Docker only: no single-node cluster needed
    --forky) forky ;;
    "") ;;
    *) die "usage: image.sh [--docker-only | --forky | --unload]" ;;
  esac
  take_lock
  [[ $DOCKER_ONLY == 1 ]] || daemon_alive containerd || die "the test cluster is not up: run tests/cluster/up.sh first"
  [[ -f $DOCKERFILE ]] || die "$DOCKERFILE not found"
  local hash; hash=$(content_hash)
  if [[ $DOCKER_ONLY == 1 ]]; then
    mkdir -p "$BUILD" "$LOGS"
    start_dockerd
    [[ $(docker_hash) == "$hash" ]] && docker_ image inspect "${EXTRA_IMAGES[@]}" >/dev/null 2>&1 &&
      { log "$IMAGE in Docker is up to date ($HASH_LABEL=$hash)"; return 0; }
    ensure_packages docker.io debootstrap
    ensure_base
    build_and_load "$hash"
    log "$IMAGE built into Docker ($HASH_LABEL=$hash) in $((SECONDS - START))s"
    return 0
  fi
  if [[ $(loaded_hash) == "$hash" ]]; then
    log "$IMAGE is up to date ($HASH_LABEL=$hash)"
    return 0
  fi
  ensure_packages docker.io debootstrap
  mkdir -p "$BUILD"
  start_dockerd
  ensure_base
  build_and_load "$hash"
  log "$IMAGE loaded ($HASH_LABEL=$hash) in $((SECONDS - START))s"
}

main "$@"
