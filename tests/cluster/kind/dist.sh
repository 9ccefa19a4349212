#!/usr/bin/env bash
# tests/dist (real launchers and gloo workers, no cluster) inside the kind nodes'
# image: Debian forky's own torch 2.14 on Python 3.14, built without libuv; the
# suite's kdist is this checkout's (mounted read-only), the rest is the image's.
# So kdist's runtime is tested on a second torch and Python beside `make test`'s
# PyPI torch 2.15 on this machine's Python. Needs the kind cluster's Docker and
# image (up.sh); pytest comes as cp314-ready pure-Python wheels, cached.
#
#   bash tests/cluster/kind/dist.sh [PYTEST ARGS...]   (default: the DIST_TESTS below)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
LOG_TAG=kind-dist
START=$SECONDS

# The runtime's own tests: launch (ranks, exit codes, the store, the torch check),
# kdist's DDP and FSDP2 workloads with restarts, the shipped runtime.
DIST_TESTS=(tests/dist/test_launch.py tests/dist/test_ddp.py tests/dist/test_fsdp.py
  tests/dist/test_worker_restarts.py tests/dist/test_shipped_runtime.py)
DEPS=$KIND_CACHE/pytest-cp314
PYTEST_REQS=("pytest>=8" pytest-timeout)

docker_() { "$DOCKER_CLI" --host "unix://$DOCKER_SOCK" "$@"; }

main() {
  require_root
  docker_ image inspect "$TRAIN_IMAGE" >/dev/null 2>&1 ||
    die "no $TRAIN_IMAGE in kind's Docker ($DOCKER_SOCK): run tests/cluster/kind/up.sh first"
  if [[ ! -f $DEPS/.done ]]; then
    log "pytest for Python 3.14 into $DEPS"
    rm -rf "$DEPS"; mkdir -p "$DEPS"
    python3 -m pip install --quiet --target "$DEPS" --only-binary=:all: --python-version 3.14 \
      --implementation cp --platform any --platform manylinux_2_17_x86_64 "${PYTEST_REQS[@]}" ||
      die "downloading pytest for Python 3.14 failed"
    touch "$DEPS/.done"
  fi
  local tests=("$@"); ((${#tests[@]})) || tests=("${DIST_TESTS[@]}")
  log "tests/dist in $TRAIN_IMAGE: ${tests[*]}"
  # As the pods run: UID 1000, the host network (gloo on 127.0.0.1), the image's
  # environment (USE_LIBUV=0); the checkout read-only, first on the path.
  docker_ run --rm --network host --user 1000:1000 --workdir /src --tmpfs /tmp:exec \
    -v "$REPO:/src:ro" -v "$DEPS:/deps:ro" -e PYTHONPATH=/src:/deps -e HOME=/tmp \
    -e PYTHONDONTWRITEBYTECODE=1 --entrypoint python3 "$TRAIN_IMAGE" \
    -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, flush=True)
import pytest; sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))' \
    "${tests[@]}"
  log "tests/dist passed in $TRAIN_IMAGE in $((SECONDS - START))s"
}

main "$@"
