#!/usr/bin/env bash
# Builds here, for each git ref given, the CLI and test_cuda_ops into
# .devvar/<name>/ (git-ignored), to carry to the GPU machine and compare there
# in one call: `bench/device.sh tests` with BUILD=.devvar/<name> runs the GPU
# tests and `fusednorm check` of that build, `bench/device.sh ab` with
# AB_BUILD=".devvar/<a> .devvar/<b>" times them against BUILD. The CLI links the
# library statically, so it is all a variant needs (about 13 MiB with the test).
#
#   bench/devvar.sh main wip/static-tpr wip/residual-plain
#   -> .devvar/main .devvar/static-tpr .devvar/residual-plain, packed into
#      .devvar.tar.xz; then run with carry [".devvar.tar.xz"]:
#        tar xJf .devvar.tar.xz
#        for v in .devvar/*; do OUT=$OUT/t-${v##*/} BUILD=$v bash bench/device.sh tests; done
#        OUT=$OUT/ab BUILD=.devvar/main AB_BUILD=".devvar/static-tpr" bash bench/device.sh ab
#
# Each ref is built in a temporary git worktree (sm_90 only, Release), so the
# checkout here is left as it is; a ref's name is its last path component.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { sed -n '2,16p' "$0"; exit 2; }
limit=$((64 * 1024 * 1024))
for ref in "$@"; do
  git rev-parse --verify --quiet "$ref^{commit}" >/dev/null || { echo "devvar: no such ref: $ref" >&2; exit 1; }
done
for ref in "$@"; do
  name=${ref##*/}
  wt=$(mktemp -d /tmp/fusednorm-devvar.XXXXXX)
  echo "== $ref -> .devvar/$name"
  git worktree add --quiet --detach "$wt" "$ref"
  if ! (cmake -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
        cmake --build "$wt/build" -j "$(nproc)" --target fusednorm_cli test_cuda_ops >"$wt/build.log" 2>&1); then
    tail -30 "$wt/build.log" >&2
    git worktree remove --force "$wt"
    exit 1
  fi
  rm -rf ".devvar/$name" && mkdir -p ".devvar/$name"
  cp "$wt/build/fusednorm" "$wt/build/test_cuda_ops" ".devvar/$name/"
  # the targets stage's helper, where the ref has it (bench/device_floors.cu)
  if [ -f "$wt/bench/device_floors.cu" ] && cmake --build "$wt/build" --target device_floors >>"$wt/build.log" 2>&1; then
    cp "$wt/build/device_floors" ".devvar/$name/"
  fi
  git -C "$wt" rev-parse HEAD >".devvar/$name/commit"
  git worktree remove --force "$wt"
done
# Carry the archive and unpack it there first (`tar xJf .devvar.tar.xz`). Each
# binary (~20 MiB) holds the same kernels: with xz's default 8 MiB dictionary
# each compresses alone (~5.5 MiB, 8 binaries 65 MiB), with a dictionary
# larger than the archive they share it (session 13: 8 binaries, 160 MiB ->
# 11 MiB).
tar cf - .devvar | xz -T2 -6 --lzma2=dict=192MiB >.devvar.tar.xz
bytes=$(stat -c %s .devvar.tar.xz)
printf '.devvar: %d MiB, .devvar.tar.xz: %d MiB (carry limit 64 MiB, with anything else carried)\n' \
  $(($(du -cb .devvar | tail -1 | cut -f1) / 1024 / 1024)) $((bytes / 1024 / 1024))
[ "$bytes" -le "$limit" ] || { echo "devvar: over the carry limit" >&2; exit 1; }
