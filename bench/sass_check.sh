#!/usr/bin/env bash
# Looks for the cp.async form that ptxas 13.0 encodes wrongly in a build's
# sm_90 code: LDGSTS with a uniform register in its shared address
# (LDGSTS [R + UR + imm]), whose uniform registers (UR0, and desc[UR1], an odd
# pair) the kernel never writes; on the device that is "an illegal
# instruction" (docs/perf.md, session 33). Needs cuobjdump and nvdisasm (the
# device has them; elsewhere: pip download nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm, unzip, put their bin/ on PATH).
#   bench/sass_check.sh [library]   (default .devbin/libfusednorm.so); exit 1 if found
set -euo pipefail
lib=${1:-.devbin/libfusednorm.so}
command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null || { echo "sass_check: cuobjdump and nvdisasm needed" >&2; exit 2; }
bad=$(cuobjdump -sass "$lib" | awk '/Function :/ {f = $3} /LDGSTS[^;]*\+UR/ {n[f]++} END {for (k in n) print n[k], k}')
if [ -n "$bad" ]; then
  echo "sass_check: LDGSTS [R + UR + imm] (ptxas 13.0 miscompile) in:"; echo "$bad" | c++filt
  exit 1
fi
echo "sass_check: $lib clean ($(cuobjdump -sass "$lib" | grep -c LDGSTS) LDGSTS)"
