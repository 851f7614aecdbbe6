#!/usr/bin/env bash
# Builds here what bench/device.sh runs on the GPU machine, and gathers it in
# .devbin/ (git-ignored) to be carried there: the device has the same nvcc, and
# building on it would spend device time.
#
#   bench/devbin.sh            then: run with carry [".devpack.tar.xz"]:
#                                tar xJf .devpack.tar.xz && BUILD=.devbin bench/device.sh ...
#
# sm_90 only (the H200), PTX assembler report on (FUSEDNORM_PTXAS_VERBOSE) so that
# register counts and spills can be read here before any device time is spent
# (build-dev/ptxas.log holds the report of the files this build compiled):
#   grep -A3 "Compiling entry" build-dev/ptxas.log
# The carry limit is 64 MiB: only the CLI, the shared library, the GPU tests,
# device_floors, odd_grid_probe go (the static library and the CPU tests stay here), stripped,
# packed into .devpack.tar.xz (git-ignored; each binary holds the same kernels,
# which one large xz dictionary stores once: about 11 MiB for ~100 MiB). Carry
# it and unpack it there first: `tar xJf .devpack.tar.xz`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-dev}
# LINEINFO=1 adds source lines for ncu's source view (the kernels double in size).
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DFUSEDNORM_PTXAS_VERBOSE=ON \
  -DFUSEDNORM_LINEINFO="$([ "${LINEINFO:-0}" = 1 ] && echo ON || echo OFF)" >/dev/null
# The assembler's report replaces ptxas.log only when this build compiled
# something (a build with nothing to do keeps the last report).
log=$(mktemp)
cmake --build "$BUILD" -j "$(nproc)" 2>&1 | tee "$log" | grep -E "error:|warning( #|:)" || true
grep -q "ptxas info" "$log" && cp "$log" "$BUILD/ptxas.log"
rm -f "$log"
rm -rf .devbin && mkdir -p .devbin
cp "$BUILD"/{fusednorm,test_cuda_ops,test_api_errors,test_determinism,test_cluster_xchg,device_floors,odd_grid_probe} .devbin/
cp -L "$BUILD/libfusednorm.so" .devbin/
strip .devbin/{fusednorm,test_cuda_ops,test_api_errors,test_determinism,test_cluster_xchg,device_floors,odd_grid_probe}
strip --strip-unneeded .devbin/libfusednorm.so
tar cf - .devbin | xz -T"$(nproc)" -6 --lzma2=dict=192MiB >.devpack.tar.xz
bytes=$(stat -c %s .devpack.tar.xz)
limit=$((64 * 1024 * 1024))
printf '.devbin: %d MiB, .devpack.tar.xz: %d MiB of the 64 MiB carry limit\n' \
  $(($(du -cb .devbin | tail -1 | cut -f1) / 1024 / 1024)) $((bytes / 1024 / 1024))
if [ "$bytes" -gt "$limit" ]; then
  echo "devbin: over the carry limit; drop a test binary, or LINEINFO=0" >&2
  exit 1
fi
# ptxas 13.0's LDGSTS [R + UR + imm] miscompile (bench/sass_check.sh), where
# cuobjdump and nvdisasm are on PATH: before any device time is spent on it.
if command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null; then
  bash bench/sass_check.sh .devbin/libfusednorm.so
else
  echo "devbin: no cuobjdump/nvdisasm here: bench/sass_check.sh not run (see its header;" \
    "pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm puts them in site-packages/nvidia/cu13/bin)"
fi
