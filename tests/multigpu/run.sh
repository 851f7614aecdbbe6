#!/usr/bin/env bash
# The multi-GPU checks, in one call on a machine with 2 GPUs:
#   1. the C API on devices 0 and 1 from one process (tests/multigpu/test_two_devices.c);
#   2. the same through PyTorch (tests/multigpu/test_torch_two_devices.py);
#   3. DDP and FSDP2 training, fusednorm vs torch.nn, step by step
#      (tests/multigpu/test_ddp_parity.py, torchrun, NCCL);
#   4. the example as a user runs it (torchrun examples/ddp_train.py).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends).
#
#   tests/multigpu/run.sh            env: BUILD (default build): the build folder,
#                                    built here (sm_90) when it has no library;
#                                    LOGS (default $OUT/multigpu or /tmp/multigpu-logs)
# Each stage's full log goes to $LOGS; failures show their tail here. The last
# line is "multigpu: N passed, N failed, N skipped". On a machine with 2 or more
# GPUs a skipped check counts as failed (it did not verify anything there).
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
ROOT=$PWD
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
if [ -n "${LOGS:-}" ]; then :; elif [ -n "${OUT:-}" ]; then LOGS="$OUT/multigpu"; else LOGS=/tmp/multigpu-logs; fi
mkdir -p "$LOGS"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PYTHON=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
T0=$SECONDS

passed=0 failed=0 skipped=0
log() { echo "== $(date +%T) (+$((SECONDS - T0)) s) $*"; }
# tally NAME PASSED FAILED SKIPPED
tally() {
  passed=$((passed + $2)) failed=$((failed + $3)) skipped=$((skipped + $4))
  echo "$1: $2 passed, $3 failed, $4 skipped"
}
# pytest_counts LOG: "P F S" from pytest's summary line (errors count as failed)
pytest_counts() {
  local line p f e s
  line=$(grep -E '^=*.*[0-9]+ (passed|failed|skipped|error|errors)( |,|$)' "$1" | tail -1)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || true)
  f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || true)
  e=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || true)
  s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || true)
  echo "${p:-0} $(( ${f:-0} + ${e:-0} )) ${s:-0}"
}

log "GPUs"
nvidia-smi -L 2>&1 | tee "$LOGS/gpus.txt"
GPUS=$(grep -c '^GPU ' "$LOGS/gpus.txt" || true)
if [ "${GPUS:-0}" -eq 0 ]; then  # no nvidia-smi: ask torch
  GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
fi
echo "$GPUS CUDA devices"

# ---- the library -------------------------------------------------------------
# The shared library under any of its names: a carried build may hold only the
# versioned file, without the symlinks.
shared_lib() { local f; for f in "$BUILD"/libfusednorm.so "$BUILD"/libfusednorm.so.*; do [ -f "$f" ] && { echo "$f"; return; }; done; }
if [ -f "$BUILD/libfusednorm.a" ] && [ -n "$(shared_lib)" ]; then
  log "using the build in $BUILD"
else
  log "building $BUILD (sm_90)"
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DFUSEDNORM_BUILD_TESTS=OFF -DFUSEDNORM_BUILD_TOOLS=OFF >"$LOGS/build.log" 2>&1
  fi
  cmake --build "$BUILD" -j "$(nproc)" --target fusednorm fusednorm_static >>"$LOGS/build.log" 2>&1 ||
    { tail -40 "$LOGS/build.log"; tally build 0 1 0; echo "multigpu: $passed passed, $failed failed, $skipped skipped"; exit 1; }
fi

FUSEDNORM_LIBRARY=$(shared_lib)
export FUSEDNORM_LIBRARY
echo "library: $FUSEDNORM_LIBRARY"

# ---- 1. the C API on two devices --------------------------------------------
log "C API on two devices"
T2D="$LOGS/test_two_devices"
CUDA_LIBDIR="$CUDA_HOME/lib64"
[ -d "$CUDA_LIBDIR" ] || CUDA_LIBDIR="$CUDA_HOME/lib"
if gcc -O2 -std=c11 -Wall -Wextra -Iinclude -I"$CUDA_HOME/include" tests/multigpu/test_two_devices.c \
     "$BUILD/libfusednorm.a" -L"$CUDA_LIBDIR" -Wl,-rpath,"$CUDA_LIBDIR" -lcudart -lgomp -lstdc++ -lpthread -lm \
     -o "$T2D" >"$LOGS/test_two_devices.build.log" 2>&1; then
  timeout 180 "$T2D" >"$LOGS/test_two_devices.log" 2>&1
  rc=$?
  last=$(tail -1 "$LOGS/test_two_devices.log")
  head -n 2 "$LOGS/test_two_devices.log"
  if [ $rc -eq 77 ]; then
    tally test_two_devices 0 0 1
  elif [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    f=${BASH_REMATCH[2]}
    [ $rc -ne 0 ] && [ "$f" -eq 0 ] && f=1
    tally test_two_devices "${BASH_REMATCH[1]}" "$f" 0
    [ "$f" -ne 0 ] && grep -m 30 '^FAIL' "$LOGS/test_two_devices.log"
  else
    tail -20 "$LOGS/test_two_devices.log"
    tally "test_two_devices (exit $rc)" 0 1 0
  fi
else
  tail -30 "$LOGS/test_two_devices.build.log"
  tally "test_two_devices (build)" 0 1 0
fi

# ---- 2 and 3. pytest ---------------------------------------------------------
run_pytest() { # NAME TIMEOUT FILE
  log "$1"
  timeout "$2" "$PYTHON" -m pytest -q -s -rfEs -p no:cacheprovider "$3" >"$LOGS/$1.log" 2>&1
  local rc=$? counts
  counts=$(pytest_counts "$LOGS/$1.log")
  read -r p f s <<<"$counts"
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # timeout, crash, import error
  grep -oE '(ddp_train: |blocks\.[0-9]+\.norm|norm_f\.).*' "$LOGS/$1.log" | sed 's/^/  /'
  if [ "$f" -ne 0 ] || [ $rc -ne 0 ]; then tail -60 "$LOGS/$1.log"; fi
  grep -E '^SKIPPED' "$LOGS/$1.log" | head -5
  tally "$1 (exit $rc)" "$p" "$f" "$s"
}
if "$PYTHON" -c "import pytest, torch" 2>/dev/null; then
  run_pytest test_torch_two_devices 240 tests/multigpu/test_torch_two_devices.py
  run_pytest test_ddp_parity 420 tests/multigpu/test_ddp_parity.py
else
  echo "python3 cannot import pytest and torch: the Python checks cannot run"
  tally pytest 0 1 0
fi

# ---- 4. the example, as a user runs it ----------------------------------------------
log "example: torchrun --standalone --nproc_per_node=2 examples/ddp_train.py --steps 20"
if [ "$GPUS" -ge 2 ]; then
  timeout 180 "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node=2 examples/ddp_train.py --steps 20 \
    >"$LOGS/example.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q '^ddp_train:' "$LOGS/example.log"; then
    grep -E '^(step|ddp_train:)' "$LOGS/example.log" | sed -n '1p;$p'
    tally example 1 0 0
  else
    tail -40 "$LOGS/example.log"
    tally "example (exit $rc)" 0 1 0
  fi
else
  echo "fewer than 2 GPUs: the example runs on the CPU instead (gloo, one process)"
  timeout 180 "$PYTHON" examples/ddp_train.py --cpu --steps 3 --dtype f32 >"$LOGS/example.log" 2>&1
  rc=$?
  tail -1 "$LOGS/example.log"
  if [ $rc -eq 0 ]; then tally "example (cpu)" 0 0 1; else tally "example (cpu, exit $rc)" 0 1 0; fi
fi

if [ "$GPUS" -ge 2 ] && [ "$skipped" -gt 0 ]; then
  echo "$GPUS GPUs here, yet $skipped checks skipped: counted as failed"
  failed=$((failed + skipped))
fi
log "done, logs in $LOGS"
echo "multigpu: $passed passed, $failed failed, $skipped skipped ($((SECONDS - T0)) s)"
[ "$failed" -eq 0 ]
