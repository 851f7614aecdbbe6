#!/usr/bin/env python3
"""Host overhead of the Python layer: the time one fusednorm call spends on the
host above the C library call it makes (the kernel launch, on CUDA).

For a tiny problem (default 4 x 64) it times, per call, on the host clock:
  c_fwd / c_bwd          the C library alone, args prebuilt (the floor)
  rmsnorm(no grad)       fusednorm.rmsnorm under torch.no_grad()
  rmsnorm(grad)          fusednorm.rmsnorm building its autograd node
  fwd+bwd(autograd)      rmsnorm then torch.autograd.grad (includes torch's engine)
  rmsnorm_fwd/_bwd       the explicit pair
  op fwd/op bwd          the torch.library custom ops called directly (compile path)
  torch F.rms_norm       PyTorch eager, for comparison
and prints overhead = time - floor. The target (perf-targets.md) is <= 15 us
for one forward or backward call. On CUDA the calls are queued without a sync
(kernels this small finish faster than the host submits them), then synced.

    PYTHONPATH=python python3 bench/python_overhead.py [--device cuda] [--rows 4] [--cols 64]
"""
import argparse
import ctypes
import statistics
import time

import torch

import fusednorm
from fusednorm import _lib, _ops


def per_call_us(fn, iters, repeats=7, sync=None):
    for _ in range(max(iters // 10, 10)):
        fn()
    if sync:
        sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=64)
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads on the CPU (default: torch's)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else None
    torch.manual_seed(0)
    x = torch.randn(a.rows, a.cols, device=dev, dtype=dtype)
    w = torch.randn(a.cols, device=dev, dtype=dtype)
    dy = torch.randn_like(x)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)
    _, _, rstd = fusednorm.rmsnorm_fwd(x, w, store_rstd=True)

    # The floor: the C calls with every struct built beforehand.
    y = torch.empty_like(x)
    fa = _lib.FwdArgs()
    fa.norm, fa.rows, fa.cols, fa.eps = _lib.RMSNORM, a.rows, a.cols, 1e-6
    for ct, t in ((fa.x, x), (fa.y, y)):
        ct.data, ct.dtype = t.data_ptr(), _ops.DTYPE_CODE[dtype]
    fa.weight.data, fa.weight.dtype = w.data_ptr(), _ops.DTYPE_CODE[dtype]
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    ba = _lib.BwdArgs()
    ba.norm, ba.rows, ba.cols, ba.eps = _lib.RMSNORM, a.rows, a.cols, 1e-6
    for ct, t in ((ba.dy, dy), (ba.x, x), (ba.dx, dx)):
        ct.data, ct.dtype = t.data_ptr(), _ops.DTYPE_CODE[dtype]
    ba.weight.data, ba.weight.dtype = w.data_ptr(), _ops.DTYPE_CODE[dtype]
    ba.dweight.data, ba.dweight.dtype = dw.data_ptr(), _ops.DTYPE_CODE[dtype]
    ba.rstd = rstd.data_ptr()
    for args in (fa, ba):
        _ops._place(args, dev)
    ws_bytes = _lib.bwd_workspace_size(ba)
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
    ba.workspace, ba.workspace_bytes = ws.data_ptr(), ws_bytes
    c_fwd = ctypes.CDLL(_lib.library_path).fusednorm_fwd
    c_bwd = ctypes.CDLL(_lib.library_path).fusednorm_bwd
    pf, pb = ctypes.byref(fa), ctypes.byref(ba)

    n = a.iters
    floor_fwd = per_call_us(lambda: c_fwd(pf), n, sync=sync)
    floor_bwd = per_call_us(lambda: c_bwd(pb), n, sync=sync)

    def fwd_nograd():
        with torch.no_grad():
            fusednorm.rmsnorm(x, w)

    def fwd_grad():
        fusednorm.rmsnorm(xg, wg)

    def fwd_bwd():
        yy = fusednorm.rmsnorm(xg, wg)
        torch.autograd.grad(yy, (xg, wg), dy)

    def torch_fwd_bwd():
        yy = torch.nn.functional.rms_norm(xg, (a.cols,), wg, 1e-6)
        torch.autograd.grad(yy, (xg, wg), dy)

    rows = [
        ("c_fwd (floor)", floor_fwd, floor_fwd),
        ("c_bwd (floor)", floor_bwd, floor_bwd),
        ("rmsnorm fwd, no grad", per_call_us(fwd_nograd, n, sync=sync), floor_fwd),
        ("rmsnorm fwd, grad", per_call_us(fwd_grad, n, sync=sync), floor_fwd),
        ("rmsnorm_fwd (explicit)", per_call_us(lambda: fusednorm.rmsnorm_fwd(x, w, store_rstd=True), n, sync=sync),
         floor_fwd),
        ("rmsnorm_bwd (explicit)", per_call_us(lambda: fusednorm.rmsnorm_bwd(x, w, dy, rstd), n, sync=sync),
         floor_bwd),
        ("fwd+bwd via autograd.grad", per_call_us(fwd_bwd, n, sync=sync), floor_fwd + floor_bwd),
        ("op fwd (compile path)", per_call_us(
            lambda: torch.ops.fusednorm.fwd(x, w, None, None, _lib.RMSNORM, 1e-6, 0.0, None, None, False, True), n,
            sync=sync), floor_fwd),
        ("op bwd (compile path)", per_call_us(
            lambda: torch.ops.fusednorm.bwd(dy, x, w, rstd, None, None, _lib.RMSNORM, 1e-6, 0.0, dtype, None, True,
                                            None), n, sync=sync), floor_bwd),
        ("torch F.rms_norm fwd, no grad", per_call_us(
            lambda: torch.nn.functional.rms_norm(x, (a.cols,), w, 1e-6), n, sync=sync), None),
        ("torch F.rms_norm fwd+bwd", per_call_us(torch_fwd_bwd, n, sync=sync), None),
    ]
    print(f"device {dev}, {a.rows}x{a.cols} {a.dtype}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, library {_lib.library_path}")
    print(f"{'path':34s} {'us/call':>9s} {'overhead us':>12s}")
    for name, t, floor in rows:
        over = f"{t - floor:12.2f}" if floor is not None else f"{'':12s}"
        print(f"{name:34s} {t:9.2f} {over}")


if __name__ == "__main__":
    main()
