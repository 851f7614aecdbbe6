#!/usr/bin/env bash
# Looks for the cp.async form that ptxas 13.0 encodes wrongly in a build's
# code: LDGSTS with a uniform register in its shared address
# (LDGSTS [R + UR + imm]) whose uniform registers (UR0, and desc[UR1], an odd
# pair, in the sm_90 cases) the kernel never writes; on the device that is "an illegal
# instruction" (docs/perf.md, session 33). Needs cuobjdump and nvdisasm (the
# device has them; elsewhere: pip download nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm, unzip, put their bin/ on PATH).
#   bench/sass_check.sh [library]   (default .devbin/libfusednorm.so); exit 1 if found
# SASS_TOOLS=dir: the wheels unpacked there (nvidia/cu*/bin), as `make test`
# fetches them into build/sass-tools for ctest's sass_check. Exit 2 (ctest:
# skipped) without the tools or without device code in the library.
set -euo pipefail
lib=${1:-.devbin/libfusednorm.so}
if [ -n "${SASS_TOOLS:-}" ]; then
  for d in "$SASS_TOOLS"/nvidia/*/bin; do [ -d "$d" ] && PATH="$d:$PATH"; done
fi
command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null || {
  echo "sass_check: SKIPPED: cuobjdump and nvdisasm needed (not on PATH${SASS_TOOLS:+ nor under $SASS_TOOLS})" >&2; exit 2; }
[ -f "$lib" ] || { echo "sass_check: $lib: no such file" >&2; exit 1; }
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
cuobjdump -sass "$lib" >"$sass"
# Per function: the uniform registers some instruction writes (its first
# operand; .64 forms write a pair), then every LDGSTS whose address or
# descriptor names one that none writes. (LDGSTS [R + UR] with the register
# written is a legal form: the sm_80 code has it.)
bad=$(awk '
  function flush() { for (i = 1; i <= nl; i++) { split(lu[i], u, " "); for (j in u) if (!(u[j] in w)) { n[f]++; break } } delete w; nl = 0 }
  /Function :/ { flush(); f = $3; next }
  /\/\*[0-9a-f]+\*\// {
    line = $0; sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line); sub(/;.*/, "", line); sub(/^@!?U?P[0-9T][ \t]+/, "", line)
    split(line, t, /[ \t,]+/)
    if (t[2] ~ /^UR[0-9]+$/) { w[t[2]] = 1; if (t[1] ~ /\.64/) { r = substr(t[2], 3) + 1; w["UR" r] = 1 } }
    if (t[1] ~ /^LDGSTS/ && line ~ /\+UR/) { l = ""; s = line; while (match(s, /UR[0-9]+/)) { l = l " " substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH) } lu[++nl] = l }
  }
  END { flush(); for (k in n) print n[k], k }' "$sass")
if [ -n "$bad" ]; then
  echo "sass_check: LDGSTS [R + UR + imm] with uniform registers never written (ptxas 13.0 miscompile) in:"; echo "$bad" | c++filt
  exit 1
fi
# The kernels stage rows with cp.async: none at all means the dump saw no
# device code, not a clean library.
n=$(grep -c LDGSTS "$sass" || true)
[ "$n" -gt 0 ] || { echo "sass_check: no LDGSTS in $lib's SASS: nothing was checked" >&2; exit 1; }
echo "sass_check: $lib clean ($n LDGSTS in $(grep -c 'Function :' "$sass") kernels)"
