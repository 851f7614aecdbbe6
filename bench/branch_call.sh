#!/usr/bin/env bash
# One device call that vets a branch against main, both built here and carried
# (bench/devbin.sh -> .devpack.tar.xz for main, bench/devvar.sh BRANCH ->
# .devvar.tar.xz for the branch), in the order that keeps the timings clean:
#   1. the A/B of the branch's CLI against main's (bench/device.sh ab), first,
#      on a quiet GPU;
#   2. the branch's test_cuda_ops and `fusednorm check` (device.sh tests), then
#      `check` at the columns it changes, with the default grid and capped at 2;
#   3. compute-sanitizer memcheck and racecheck of the branch at those columns;
#   4. main's GPU tests, and memcheck / synccheck at MAIN_SANITIZE_COLS.
# Logs go to $OUT/all.tgz (a call returns at most 8 files), a summary to stdout.
#
#   run with carry [".devpack.tar.xz", ".devvar.tar.xz"]:
#     BRANCH=bwd-odd-wide AB_COLS=32769,40001,65537,65536 CHECK_COLS=40001,65537 bash bench/branch_call.sh
#
# env: BRANCH (the .devvar/ name, required), AB_COLS (required), AB_NORMS,
#      AB_DTYPES, AB_PASSES (device.sh's ab defaults otherwise), CHECK_COLS
#      (default AB_COLS), CHECK_ROWS (23), SANITIZE_BRANCH_COLS (default
#      CHECK_COLS), MAIN_SANITIZE_COLS (256,4096,65537; empty: skip step 4's
#      sanitizers)
set -u -o pipefail
cd "$(dirname "$0")/.."
: "${BRANCH:?BRANCH=<name under .devvar/>}" "${AB_COLS:?AB_COLS=<columns>}"
OUT=${OUT:-/tmp/out}
CHECK_COLS=${CHECK_COLS:-$AB_COLS}
CHECK_ROWS=${CHECK_ROWS:-23}
SANITIZE_BRANCH_COLS=${SANITIZE_BRANCH_COLS:-$CHECK_COLS}
MAIN_SANITIZE_COLS=${MAIN_SANITIZE_COLS-256,4096,65537}
export PATH=$PATH:/usr/local/cuda/bin
tar xJf .devpack.tar.xz && tar xJf .devvar.tar.xz || { echo "branch_call: carry .devpack.tar.xz and .devvar.tar.xz" >&2; exit 2; }
W=.devvar/$BRANCH
[ -x "$W/fusednorm" ] || { echo "branch_call: no $W/fusednorm in .devvar.tar.xz" >&2; exit 2; }
L=$(mktemp -d /tmp/branch-call.XXXXXX)
pack() { tar czf "$OUT/all.tgz" -C "$L" . 2>/dev/null; }
echo "== branch $BRANCH ($(cat "$W/commit" 2>/dev/null)) against main (.devbin)"

OUT=$L/ab BUILD=.devbin AB_BUILD=$W AB_COLS=$AB_COLS bash bench/device.sh ab >"$L/ab.out" 2>&1
cat "$L/ab/summary.txt" 2>/dev/null || tail -20 "$L/ab.out"
pack

OUT=$L/branch BUILD=$W bash bench/device.sh tests >"$L/branch_tests.out" 2>&1
grep -E "exit|FAIL" "$L/branch_tests.out" | head -20
for cap in "" 2; do
  FUSEDNORM_GRID_CAP=$cap "$W/fusednorm" check --backend cuda --cols "$CHECK_COLS" --rows "$CHECK_ROWS" --quiet \
    >"$L/branch_check_cap${cap:-none}.log" 2>&1
  echo "branch check at $CHECK_COLS, grid cap ${cap:-none}: exit $? ($(tail -1 "$L/branch_check_cap${cap:-none}.log"))"
done
pack
for tool in memcheck racecheck; do
  FUSEDNORM_GRID_CAP=2 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 "$W/fusednorm" check \
    --backend cuda --quiet --rows 11 --cols "$SANITIZE_BRANCH_COLS" >"$L/branch_$tool.log" 2>&1
  echo "branch $tool at $SANITIZE_BRANCH_COLS: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/branch_$tool.log" | tail -1)"
  pack
done

OUT=$L/main BUILD=.devbin bash bench/device.sh tests >"$L/main_tests.out" 2>&1
grep -E "exit|FAIL" "$L/main_tests.out" | head -20
pack
if [ -n "$MAIN_SANITIZE_COLS" ]; then
  OUT=$L/main_sanitize BUILD=.devbin SANITIZERS="memcheck synccheck" SANITIZE_COLS=$MAIN_SANITIZE_COLS \
    bash bench/device.sh sanitize >"$L/main_sanitize.out" 2>&1
  grep "compute-sanitizer" "$L/main_sanitize.out"
fi
pack
