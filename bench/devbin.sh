#!/usr/bin/env bash
# Builds here what bench/device.sh runs on the GPU machine, and gathers it in
# .devbin/ (git-ignored) to be carried there: the device has the same nvcc, and
# building on it would spend device time.
#
#   bench/devbin.sh            then: run with carry [".devbin"] and BUILD=.devbin bench/device.sh ...
#
# sm_90 only (the H200), PTX assembler report on (FUSEDNORM_PTXAS_VERBOSE) so that
# register counts and spills can be read here before any device time is spent
# (build-dev/ptxas.log holds the report of the files this build compiled):
#   grep -A3 "Compiling entry" build-dev/ptxas.log
# The carry limit is 64 MiB: only the CLI, the shared library and the GPU tests
# go (the static library and the CPU tests stay here). .devbin is about 63 MiB;
# to carry it beside other builds (bench/devvar.sh), pack it: `tar cJf
# .devpack.tar.xz .devbin` (about 15 MiB, git-ignored) and unpack it there first.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-dev}
# LINEINFO=1 adds source lines for ncu's source view (the kernels double in size).
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DFUSEDNORM_PTXAS_VERBOSE=ON \
  -DFUSEDNORM_LINEINFO="$([ "${LINEINFO:-0}" = 1 ] && echo ON || echo OFF)" >/dev/null
cmake --build "$BUILD" -j "$(nproc)" 2>&1 | tee "$BUILD/ptxas.log" | grep -E "error:|warning( #|:)" || true
rm -rf .devbin && mkdir -p .devbin
cp "$BUILD"/{fusednorm,test_cuda_ops,test_api_errors,test_determinism} .devbin/
cp -L "$BUILD/libfusednorm.so" .devbin/
bytes=$(du -cb .devbin/* | tail -1 | cut -f1)
limit=$((64 * 1024 * 1024))
printf '.devbin: %d MiB of the 64 MiB carry limit\n' $((bytes / 1024 / 1024))
if [ "$bytes" -gt "$limit" ]; then
  echo "devbin: over the carry limit; drop a test binary, or LINEINFO=0" >&2
  exit 1
fi
