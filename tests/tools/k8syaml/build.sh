#!/usr/bin/env bash
# Builds k8syaml (kubectl's YAML reader, see main.go) once per source version
# and prints the binary's path. The name carries a hash of main.go, go.mod and
# go.sum, so an edit gets a fresh binary and an unchanged tree is never rebuilt.
# The build happens in a copy under the cache: the source tree is not written.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

CACHE=${KDIST_CACHE:-$HOME/.cache/kdist}
# The same module/build caches as tests/cluster/build.sh: modules download once.
export GOPATH=$CACHE/go GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
# go.sum pins every module's hash; the checksum database adds nothing to that
# and is often unreachable from CI machines.
export GOSUMDB=${GOSUMDB:-off}

command -v go >/dev/null || { echo "k8syaml/build.sh: no Go toolchain (go) on PATH" >&2; exit 1; }
sum=$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
out=$CACHE/bin/k8syaml-$sum
if [[ ! -x $out ]]; then
  src=$CACHE/src/k8syaml-$sum
  mkdir -p "$src" "$CACHE/bin"
  cp "$here/main.go" "$here/go.mod" "$here/go.sum" "$src/"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out.tmp.$$" .)
  mv "$out.tmp.$$" "$out"  # atomic: a concurrent build never sees half a binary
fi
printf '%s\n' "$out"
