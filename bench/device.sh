#!/usr/bin/env bash
# One call on the GPU machine: build (unless a build carried from the dev
# machine runs there), the GPU tests, compute-sanitizer on one shape per
# kernel path, the benchmarks (fusednorm bench, then PyTorch peers through
# bench/torch_compare.py when present). Full logs go to $OUT; a short table
# is printed last.
#
#   bench/device.sh [stage ...]    stages: build tests lab ab ncu sanitize bench targets peers python multigpu
#                                  (default: build tests sanitize bench peers)
#   env: BUILD (default build-dev; bench/devbin.sh builds .devbin here to carry, bench/devvar.sh
#        builds branches' CLI and test_cuda_ops into .devvar/<name>), QUICK=1 (fewer bench shapes);
#        ab: AB_BUILD (builds to compare with BUILD), AB_NORMS, AB_DTYPES, AB_COLS, AB_PASSES, AB_RESIDUAL=1|2
#        ncu: NCU_PASSES, NCU_NORM, NCU_DTYPE, NCU_COLS, NCU_KERNEL (rows, or two_pass), NCU_SASS=1
#        (the library's SASS, $OUT/sass.txt.gz)
#        sanitize: SANITIZERS, SANITIZE_COLS, SANITIZE_ROWS, SANITIZE_TIMEOUT, RACECHECK_COLS,
#        RACECHECK_ROWS, RACECHECK_TIMEOUT, RACECHECK_LARGE_COLS
set -u -o pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# Logs are written to $LOGS and packed into $OUT/logs.tgz after every stage, so
# a call cut short at its time limit still brings back what ran.
FINAL_OUT=$OUT
OUT=$(mktemp -d /tmp/fusednorm-device-logs.XXXXXX) # own directory: several runs may go side by side
pack() { tar -C "$OUT" -czf "$FINAL_OUT/logs.tgz" . 2>/dev/null; cp "$OUT/summary.txt" "$FINAL_OUT/" 2>/dev/null; }
BUILD=${BUILD:-build-dev}
STAGES=${*:-build tests sanitize bench peers}
has() { pack; [[ " $STAGES " == *" $1 "* ]]; }
log() { echo "== $(date +%T) $*"; }
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"

if has build; then
  if [ -x "$BUILD/fusednorm" ] && "$BUILD/fusednorm" --version >/dev/null 2>&1; then
    log "using carried build $BUILD"
  else
    log "building $BUILD (sm_90 only)"
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 &&
      cmake --build "$BUILD" -j "$(nproc)" >>"$OUT/cmake.log" 2>&1 || { tail -50 "$OUT/cmake.log"; exit 1; }
  fi
fi
FN="$BUILD/fusednorm"
"$FN" info 2>&1 | tee "$OUT/info.txt"

if has tests; then
  log "GPU tests"
  # test_cuda_ops is bound by its CPU reference (431 s serially on the H200
  # in session 25): each of its groups runs as its own one-core process, all
  # at once (116 s on the H100 in session 31), one log per group.
  if [ -x "$BUILD/test_cuda_ops" ]; then
    t0=$(date +%s)
    groups=$(TEST_LIST=1 "$BUILD/test_cuda_ops")
    for g in $groups; do
      ( OMP_NUM_THREADS=1 TEST_ONLY=$g timeout 520 "$BUILD/test_cuda_ops" >"$OUT/test_cuda_ops_$g.log" 2>&1
        echo "exit $?" >>"$OUT/test_cuda_ops_$g.log" ) &
    done
    wait
    for g in $groups; do
      l="$OUT/test_cuda_ops_$g.log"
      echo "test_cuda_ops $g: $(tail -1 "$l"), $(grep '^group' "$l" || echo 'no group line (cut short?)')" | tee -a "$SUMMARY"
      [ "$(tail -1 "$l")" != "exit 0" ] && grep -m 20 -i "fail" "$l"
    done
    echo "test_cuda_ops: $(echo $groups | wc -w) groups in $(( $(date +%s) - t0 )) s" | tee -a "$SUMMARY"
  fi
  for t in test_api_errors test_determinism test_cluster_xchg; do
    if [ -x "$BUILD/$t" ]; then
      timeout 520 "$BUILD/$t" >"$OUT/$t.log" 2>&1
      rc=$?
      echo "$t: exit $rc, $(tail -1 "$OUT/$t.log")" | tee -a "$SUMMARY"
      [ $rc -ne 0 ] && grep -m 20 -i "fail" "$OUT/$t.log"
    fi
  done
  "$FN" check --backend cuda >"$OUT/check_cuda.log" 2>&1
  echo "fusednorm check --backend cuda: exit $? ($(grep -c PASS "$OUT/check_cuda.log") PASS, $(grep -c FAIL "$OUT/check_cuda.log") FAIL)" | tee -a "$SUMMARY"
  grep FAIL "$OUT/check_cuda.log" | head -20
  # Grids capped at 2 CTAs (clusters): every kernel that walks rows past its grid
  # does so here (the held forward's clusters at 65536 and 131072, fp32 49152
  # and 131072 in the register tile over 8 x 384 and 16 x 512, LayerNorm's
  # tile over 3 CTAs (fp32 24576) and 5 (bf16 40000, inexact), its rows off
  # 16 bytes at 4097, 7 rows each).
  FUSEDNORM_GRID_CAP=2 "$FN" check --backend cuda --cols 1024,4096,4097,24576,40000,49152,65536,131072 --rows 7 --quiet \
    >"$OUT/check_cuda_capped.log" 2>&1
  echo "fusednorm check --backend cuda, grids capped at 2: exit $? ($(tail -1 "$OUT/check_cuda_capped.log"))" |
    tee -a "$SUMMARY"
  grep FAIL "$OUT/check_cuda_capped.log" | head -20
  # The held forward's rows of one CTA (8 a CTA at 1024, 4 at 1536 and 2048):
  # 40 rows over 2 CTAs, so that each walks several row groups on the weight
  # and bias its shared memory took once (SMW, norm_fwd.cu).
  FUSEDNORM_GRID_CAP=2 "$FN" check --backend cuda --cols 1024,1536,2048 --rows 40 --quiet \
    >"$OUT/check_cuda_capped_held.log" 2>&1
  echo "fusednorm check --backend cuda, held rows, grids capped at 2: exit $? ($(tail -1 "$OUT/check_cuda_capped_held.log"))" |
    tee -a "$SUMMARY"
  grep FAIL "$OUT/check_cuda_capped_held.log" | head -20
  # The backward's ODD tile rounds a capped grid up to the rows' period (8
  # clusters for 16-bit odd N): 20 rows, so that each walks 2-3 rows of one offset.
  # 40001 and 65537: the 32-element ODD tile over 4 CTAs (16-bit), and the
  # residual call it leaves to the SHIFT tile / two-pass.
  FUSEDNORM_GRID_CAP=2 "$FN" check --backend cuda --cols 999,2047,4097,8191,40001,65537 --rows 20 --quiet \
    >"$OUT/check_cuda_capped_odd.log" 2>&1
  echo "fusednorm check --backend cuda, odd rows, grids capped at 2: exit $? ($(tail -1 "$OUT/check_cuda_capped_odd.log"))" |
    tee -a "$SUMMARY"
  grep FAIL "$OUT/check_cuda_capped_odd.log" | head -20
fi

if has lab; then
  # Plan variants (FUSEDNORM_PLAN_FWD/BWD = "ept,tpr,cluster") on the shapes
  # being tuned; one line per variant.
  log "lab"
  lab() { # pass dtype cols [plan|- [norm]]  (plan "-": the planner's)
    local var=FUSEDNORM_PLAN_FWD plan=${4:--} norm=${5:-rms}; [ "$1" = bwd ] && var=FUSEDNORM_PLAN_BWD
    [ "$plan" = - ] && plan=
    printf '%-3s %-4s %-5s %7s %-10s ' "$norm" "$1" "$2" "$3" "${plan:-planner}"
    env $var="$plan" "$FN" bench --backend cuda --norm $norm --dtype "$2" --cols "$3" --pass "$1" 2>/dev/null |
      awk '$1=="'$norm'"{print $7, $8, $9}'
  }
  {
    if [ -n "${LAB:-}" ]; then
      # LAB="pass dtype cols plan norm; ..." runs just those variants
      IFS=';' read -ra items <<<"$LAB"
      for item in "${items[@]}"; do lab $item; done
    else
    # column-split backward: where two-pass partials do not fit shared memory it
    # is the backend's choice; 0,0,0 forces it where a cluster is planned
    lab bwd bf16 262144; lab bwd bf16 65537; lab bwd f32 262144
    for pl in "" 0,0,0; do lab bwd bf16 65536 $pl; lab bwd f32 65536 $pl; done
    for pl in "" 16,512,16; do lab bwd bf16 131072 $pl; lab bwd f32 131072 $pl; done
    # odd N: the planner (two-pass) against the one-element register plans
    for pl in "" 16,288,1 8,288,2; do lab fwd bf16 4097 $pl; done
    for pl in "" 8,288,2 4,512,2; do lab bwd bf16 4097 $pl; done
    lab fwd bf16 65537; lab bwd bf16 65537; lab fwd bf16 2000; lab bwd bf16 2000
    # large N: clusters against two-pass
    for pl in "" 0,0,0; do lab fwd bf16 262144 $pl; done
    for pl in "" 16,256,1 8,512,1; do lab bwd bf16 4096 $pl; done
    for pl in "" 16,512,1 16,256,2; do lab bwd bf16 8192 $pl; done
    for pl in "" 32,128,1 16,256,1; do lab fwd bf16 4096 $pl; done
    for pl in "" 16,256,1 8,512,1; do lab fwd f32 4096 $pl; done
    fi
  } >"$OUT/lab.txt" 2>&1
  cat "$OUT/lab.txt" >>"$SUMMARY"
fi

if has ab && [ -n "${AB_BUILD:-}" ]; then
  # A/B in one call: the same benchmarks with BUILD (A) and with each build in
  # AB_BUILD (B, C, ...: other carried builds, e.g. a branch: bench/devbin.sh
  # there, then copy .devbin to .devbin-wip; or only their CLI, which links the
  # library statically), alternating per shape so that all see the same GPU state.
  log "A/B: $BUILD against $AB_BUILD"
  # AB_RESIDUAL=1: the fused residual add (fwd and bwd); 2: the same without dresidual
  case "${AB_RESIDUAL:-0}" in 1) AB_RES=--residual ;; 2) AB_RES="--residual --no-dresidual" ;; *) AB_RES= ;; esac
  {
    [ -n "$AB_RES" ] && echo "(with $AB_RES)"
    printf '%-4s %-5s %7s %-4s %9s' norm dtype cols pass "A GB/s"
    for b in $AB_BUILD; do printf ' %9s %6s' "$(basename "$b")" "/A"; done
    echo
    for norm in ${AB_NORMS:-rms ln}; do
      for dt in ${AB_DTYPES:-bf16 f32}; do
        for cols in $(echo "${AB_COLS:-256,1024,2048,4096,8192,16384,65536,262144}" | tr , ' '); do
          for pass in ${AB_PASSES:-fwd bwd}; do
            ga=$("$FN" bench --backend cuda --norm $norm --dtype $dt --cols $cols --pass $pass $AB_RES 2>/dev/null | awk '$1=="'$norm'"{print $8}')
            printf '%-4s %-5s %7s %-4s %9s' $norm $dt $cols $pass "$ga"
            for b in $AB_BUILD; do
              gb=$("$b/fusednorm" bench --backend cuda --norm $norm --dtype $dt --cols $cols --pass $pass $AB_RES 2>/dev/null | awk '$1=="'$norm'"{print $8}')
              printf ' %9s %6s' "$gb" "$(awk -v a="$ga" -v b="$gb" 'BEGIN{if (a > 0) printf "%.3f", b / a; else print "-"}')"
            done
            echo
          done
        done
      done
    done
  } >"$OUT/ab.txt" 2>&1
  cat "$OUT/ab.txt" >>"$SUMMARY"
fi

if has ncu; then
  # One launch of each register-path kernel under Nsight Compute (full set,
  # SASS with source lines), and the SASS of the library, for reading here:
  #   ncu_<pass>_<cols>_details.txt  throughput, issue, stall breakdown
  #   ncu_<pass>_<cols>_source.csv   per SASS instruction: executions, stall samples
  #   ncu_<pass>_<cols>_summary.txt  instructions per element, by opcode (bench/ncu_summary.py)
  log "ncu"
  # NCU_COLS may list several column counts (65536,65537: the aligned and ODD
  # tiles side by side); the files of each get its count in their names.
  for pass in ${NCU_PASSES:-fwd bwd}; do for cols in $(echo "${NCU_COLS:-4096}" | tr , ' '); do
    tag=${pass}_$cols rep="$OUT/ncu_${pass}_$cols"
    timeout 180 ncu --kernel-name "regex:norm_${pass}_${NCU_KERNEL:-rows}" --launch-skip 5 --launch-count 1 --set full \
      --import-source yes -f -o "$rep" "$FN" bench --backend cuda --norm ${NCU_NORM:-rms} --dtype ${NCU_DTYPE:-bf16} \
      --cols $cols --pass $pass --iters 3 >"$OUT/ncu_$tag.log" 2>&1
    echo "ncu $pass $cols: exit $?" | tee -a "$SUMMARY"
    ncu --import "$rep.ncu-rep" --page details >"$OUT/ncu_${tag}_details.txt" 2>&1
    ncu --import "$rep.ncu-rep" --page source --print-source sass --csv >"$OUT/ncu_${tag}_source.csv" 2>&1
    elems=$((cols < 65536 ? 32768 * cols : (1 << 30) / cols * cols)) # the bench's default rows
    python3 bench/ncu_summary.py "$OUT/ncu_${tag}_source.csv" --elements $elems >"$OUT/ncu_${tag}_summary.txt" 2>&1
    head -12 "$OUT/ncu_${tag}_summary.txt" >>"$SUMMARY"
    rm -f "$rep.ncu-rep"
  done; done
  # The library's SASS only when asked: with it logs.tgz outgrows what a call
  # brings back (16 MiB a file), and the details above are lost with it.
  [ "${NCU_SASS:-0}" = 1 ] && cuobjdump -sass "$BUILD/libfusednorm.so" 2>/dev/null | gzip >"$FINAL_OUT/sass.txt.gz"
fi

if has sanitize; then
  log "compute-sanitizer"
  # Every kernel path, forward and backward, every norm, feature and dtype
  # (fusednorm check runs them all per column count):
  #   256     registers, several rows per CTA (one warp or less per row)
  #   999     rows off 16 bytes: the held forward's ODD form, the backward's
  #           ODD tile (64 threads a row, run-time tpr; under the grid cap
  #           8 CTAs, each walking rows of one offset); SHIFT kernels and
  #           two-pass for the calls those do not take (mixed dtypes)
  #   1024    the held forward (common and residual calls: 32 threads a row,
  #           8 rows a CTA); 2048, 4096, 16384 and 32768 too (64..512 threads)
  #   2048    registers, 4 rows per CTA of 2 warps each (per-row named barriers)
  #   4096    registers, cp.async pipeline (16-bit), weight cache, PLAIN variants
  #   32768   clusters of 2 (the forward's other calls: fp32 weights, fp32 y)
  #   4097    the backward's ODD tile compiled for tpr 256 (the last row's
  #           tail loaded in the row body); two-pass (rows peeled to 16
  #           bytes, dweight partials in shared memory) for an fp32 residual
  #           stream beside 16-bit activations
  #   16384   one CTA per row: the backward's 32-element tile (128 KiB of stages)
  #   65536   the held forward over clusters of 4 CTAs (common and residual
  #           calls; distributed shared memory, the exit barrier split);
  #           register-tile clusters for the other calls
  #   65537   the held forward's ODD form over a cluster (head and tail on
  #           its first CTA); the backward's ODD form, 16-bit in the 32-element
  #           tile over 4 CTAs (fp32 over 16), the 16-bit residual call two-pass
  #   131072  the largest clusters (held: 8 CTAs; register tile 8 fwd, 16 bwd)
  #   300000  the streaming forward (one CTA per row, re-reads from L1 / L2);
  #           column split: two-pass statistics pass, then norm_bwd_columns
  # FUSEDNORM_GRID_CAP=2 keeps the persistent grids at 2 CTAs (clusters), so a
  # small problem still walks several rows per CTA: pipeline stages reused,
  # partial rows summed. memcheck also runs with the default grids, and over
  # the atomic dweight path (bench --atomic, one launch per case).
  # racecheck also runs each large-row path (clusters at 65536; two-pass forward and
  # column-split backward at 300000; RACECHECK_LARGE_COLS picks others), rms and
  # ln, bf16 and f32, one launch each on 4 rows, so that under the grid cap a
  # cluster walks 2 (bench --warmup 0: 2-5 s per case); and 65537 (the ODD
  # backward over clusters, bf16 in the 32-element tile) on 20 rows, the capped
  # grid being 8 clusters there.
  # Odd row counts (23, 11): a tensor's size is then no multiple of 16 bytes at
  # odd N, so a read past its last row's end leaves the allocation and memcheck
  # sees it (session 8: at 24 rows the SHIFT kernels' cp.async window past the
  # last row's end stayed inside and went unseen).
  # Device time (session 4, the default set with SANITIZE_ROWS=12 RACECHECK_ROWS=8):
  # about 200 s for the whole stage; memcheck with the default grids at 96 rows and
  # every column count did not finish in 100 s, at 24 rows 131072 and 300000 took 38 s.
  COLS=${SANITIZE_COLS:-256,999,1024,2048,4096,4097,16384,32768,65536,65537,131072,300000}
  san() { # name tool timeout cmd...
    local name=$1 tool=$2 t=$3; shift 3
    timeout "$t" compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" >"$OUT/sanitize_$name.log" 2>&1
    local rc=$?
    echo "compute-sanitizer $name: exit $rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$name.log" | tail -1)" | tee -a "$SUMMARY"
    [ $rc -ne 0 ] && grep -m 12 -E "=========  (Invalid|Race|Uninit|Barrier|Error)|FAIL" "$OUT/sanitize_$name.log"
    pack # a call cut short at its limit keeps every finished tool's log
  }
  for tool in ${SANITIZERS:-memcheck racecheck synccheck initcheck}; do
    rows=${SANITIZE_ROWS:-23} cols=$COLS t=${SANITIZE_TIMEOUT:-150}
    [ $tool = racecheck ] && { rows=${RACECHECK_ROWS:-11} cols=${RACECHECK_COLS:-256,999,1024,2048,4096,4097,16384,32768} t=${RACECHECK_TIMEOUT:-240}; }
    FUSEDNORM_GRID_CAP=2 san "$tool" "$tool" "$t" "$FN" check --backend cuda --quiet --rows $rows --cols $cols
    if [ $tool = memcheck ]; then
      san memcheck_default_grid memcheck "$t" "$FN" check --backend cuda --quiet --rows 23 --cols $COLS
      FUSEDNORM_GRID_CAP=2 san memcheck_atomic memcheck "$t" "$FN" bench --backend cuda --rows 24 \
        --cols 256,999,4096,4097,65536,300000 --dtype bf16,f32 --norm rms,ln --pass bwd --atomic --iters 1 --warmup 0
    fi
    if [ $tool = racecheck ]; then
      for norm in rms ln; do for dt in bf16 f32; do for c in ${RACECHECK_LARGE_COLS:-65536 300000 65537}; do
        r=4; [ $c = 65537 ] && r=20
        FUSEDNORM_GRID_CAP=2 san "racecheck_${norm}_${dt}_$c" racecheck 60 "$FN" bench --backend cuda --rows $r \
          --cols $c --dtype $dt --norm $norm --pass both --iters 1 --warmup 0
      done; done; done
    fi
  done
fi

if has bench; then
  log "bench"
  # 1001 and 2047: rows off 16 bytes (SHIFT); 2000, 3000, 12000: rows that
  # fill their tile in part (PLAIN, not EXACT); 4097, 65537: rows off 16 bytes
  # (the held forward's and the backward's ODD forms)
  COLS=256,1001,1024,2000,2047,2048,3000,4096,4097,8192,12000,16384,32768,65536,65537,131072,262144
  [ "${QUICK:-0}" = 1 ] && COLS=256,1024,4096,8192,32768,131072
  COLS=${BENCH_COLS:-$COLS}
  "$FN" bench --backend cuda --norm rms --dtype bf16,f32 --cols $COLS --pass both --atomic \
    --csv "$OUT/bench_rms.csv" >"$OUT/bench_rms.txt" 2>"$OUT/bench_rms.err"
  "$FN" bench --backend cuda --norm ln --dtype bf16,f32 --cols $COLS --pass both \
    --csv "$OUT/bench_ln.csv" >"$OUT/bench_ln.txt" 2>"$OUT/bench_ln.err"
  "$FN" bench --backend cuda --norm rms --residual --dtype bf16 --cols 1024,4096,8192,65536 --pass both \
    --csv "$OUT/bench_res.csv" >"$OUT/bench_res.txt" 2>"$OUT/bench_res.err"
  # the PyTorch package's residual call: no dresidual (it is dx)
  "$FN" bench --backend cuda --norm rms --residual --no-dresidual --dtype bf16 --cols 1024,4096,8192,65536 --pass bwd \
    --csv "$OUT/bench_res_nodr.csv" >"$OUT/bench_res_nodr.txt" 2>"$OUT/bench_res_nodr.err"
  # the mixed-precision call (bf16 x, fp32 weight / bias and their gradients)
  "$FN" bench --backend cuda --norm rms,ln --dtype bf16/w32 --cols 1024,4096,8192,32768 --pass both \
    --csv "$OUT/bench_w32.csv" >"$OUT/bench_w32.txt" 2>"$OUT/bench_w32.err"
  for m in 512 4096 32768 131072; do
    "$FN" bench --backend cuda --norm rms --dtype bf16 --rows $m --cols 2048,8192 --pass bwd --atomic
  done >"$OUT/bench_atomic.txt" 2>"$OUT/bench_atomic.err"
fi

if has targets; then
  # Every performance target of perf-targets.md in one run: RMSNorm, LayerNorm
  # and RMSNorm + residual, bf16 and fp32, forward and backward, N = 256 ..
  # 262144 at the targets' M (32768, or 2^30 / N from 65536); deterministic
  # against atomic dweight at M = 512 .. 131072; small problems (M * N = 2^20)
  # against the launch floor. bench/targets.py writes the
  # matrix (% of copy, '*' short) and the list of short cases, each against a
  # copy of its own bytes too (the bench's --same-size-copy; device_floors'
  # curve of copy bandwidth by size goes with it).
  log "targets"
  COLS=${TARGET_COLS:-256,1024,2048,4096,8192,16384,32768,65536,131072,262144}
  # --same-size-copy: each case against a copy of its own bytes as well
  "$FN" bench --backend cuda --norm rms,ln --dtype bf16,f32 --cols $COLS --pass both --same-size-copy \
    --csv "$OUT/targets_norm.csv" >"$OUT/targets_norm.txt" 2>"$OUT/targets_norm.err"
  pack # each part packed as it ends: a call cut short at its limit still brings back the parts it ran
  # perf-targets.md's odd sizes (no cliff: 2000, 4097, 65537 within 10% of their neighbours)
  "$FN" bench --backend cuda --norm rms,ln --dtype bf16,f32 --cols 1992,2000,2008,4097,4104,65537,65544 --pass both \
    --csv "$OUT/targets_cliff.csv" >"$OUT/targets_cliff.txt" 2>"$OUT/targets_cliff.err"
  pack
  "$FN" bench --backend cuda --norm rms --residual --dtype bf16,f32 --cols $COLS --pass both --same-size-copy \
    --csv "$OUT/targets_res.csv" >"$OUT/targets_res.txt" 2>"$OUT/targets_res.err"
  pack
  for m in 512 4096 32768 131072; do
    "$FN" bench --backend cuda --norm rms --dtype bf16,f32 --rows $m --cols 2048,8192 --pass bwd --atomic \
      --csv "$OUT/targets_atomic_$m.csv" >>"$OUT/targets_atomic.txt" 2>>"$OUT/targets_atomic.err"
  done
  pack
  # small problems (M * N = 2^20): within 2 us of the launch floor
  for mn in 4096:256 1024:1024 256:4096 64:16384; do
    "$FN" bench --backend cuda --norm rms,ln --dtype bf16,f32 --rows ${mn%:*} --cols ${mn#*:} --pass both \
      --same-size-copy --csv "$OUT/targets_small_${mn%:*}.csv" >>"$OUT/targets_small.txt" 2>>"$OUT/targets_small.err"
  done
  pack
  # copies of 4 MiB .. 1 GiB (short problems cannot reach the 1 GiB copy's rate)
  # and the launch floor, one file for both of targets.py's readings
  extra=
  if [ -x "$BUILD/device_floors" ] && "$BUILD/device_floors" >"$OUT/device_floors.txt" 2>&1; then
    extra="--copy-by-size $OUT/device_floors.txt --launch-floor $OUT/device_floors.txt"
  fi
  python3 bench/targets.py "$OUT"/targets_*.csv $extra >"$OUT/targets.md" 2>&1
  echo "targets: $(grep -m1 'targets met' "$OUT/targets.md"); $(grep -m1 'small problems within' "$OUT/targets.md"); $(grep -m1 'odd sizes within' "$OUT/targets.md")" |
    tee -a "$SUMMARY"
fi

if has python && [ -d tests/python ]; then
  log "pytest on CUDA"
  FUSEDNORM_LIBRARY="$PWD/$BUILD/libfusednorm.so" PYTHONPATH=python timeout ${PYTEST_TIMEOUT:-500} python3 -m pytest -q --durations=20 tests/python \
    >"$OUT/pytest.log" 2>&1
  echo "pytest: exit $? $(tail -1 "$OUT/pytest.log")" | tee -a "$SUMMARY"
  [ -f bench/python_overhead.py ] && FUSEDNORM_LIBRARY="$PWD/$BUILD/libfusednorm.so" PYTHONPATH=python \
    timeout 60 python3 bench/python_overhead.py --device cuda >"$OUT/python_overhead.txt" 2>&1
fi

if has peers && [ -f bench/torch_compare.py ]; then
  log "PyTorch peers"
  PYTHONUNBUFFERED=1 FUSEDNORM_LIBRARY="$PWD/$BUILD/libfusednorm.so" PYTHONPATH=python \
    timeout ${PEERS_TIMEOUT:-500} python3 bench/torch_compare.py --out "$OUT" --repeat-first ${PEERS_COLS:+--cols $PEERS_COLS} >"$OUT/peers.txt" 2>&1
  echo "torch_compare: exit $?" | tee -a "$SUMMARY"
fi

if has multigpu && [ -f tests/multigpu/run.sh ]; then
  log "multi-GPU"
  BUILD="$BUILD" timeout 500 bash tests/multigpu/run.sh >"$OUT/multigpu.log" 2>&1
  echo "multigpu: exit $? $(tail -1 "$OUT/multigpu.log")" | tee -a "$SUMMARY"
fi

echo
echo "================ summary ================"
cat "$SUMMARY"
for f in bench_rms bench_ln bench_res bench_res_nodr bench_w32; do [ -f "$OUT/$f.txt" ] && { echo "-- $f"; cat "$OUT/$f.txt"; }; done
[ -f "$OUT/bench_atomic.txt" ] && { echo "-- atomic vs deterministic"; cat "$OUT/bench_atomic.txt"; }
echo "-- summary"
cat "$SUMMARY"

pack
