#!/usr/bin/env python3
"""fusednorm through PyTorch against PyTorch eager and torch.compile, forward
and backward, over the shapes of docs perf-targets (H200 table), on one GPU.

Writes <out>/torch_compare.csv (one row per norm, dtype, feature, M, N, pass,
implementation: median ms, GB/s, % of the copy bandwidth measured in the same
run) and <out>/torch_compare.png (GB/s against N per implementation, one panel
per norm/feature and pass). Needs matplotlib for the chart; without it the CSV
is written and `--plot CSV` draws the chart later on any machine.

GB/s uses the bytes each pass must move (perf-targets.md):
  forward:  read x (+ residual), write y (+ residual_out), read weight (+ bias);
            rstd/mean are not stored by any implementation here (inference).
  backward: read x, dy, weight, rstd (+ mean); write dx, dweight (+ dbias);
            with a fused residual also read dresidual_out and write dresidual
            (dx serves as dresidual when the dtypes match).
Timing: CUDA events around each call, L2 flushed (a 512 MiB write) before each
run, warm-up first, median of --reps. The backward of torch eager / compile is
the autograd graph of one forward, replayed with retain_graph; fusednorm's is
timed that way too and also called directly ("fusednorm explicit":
rmsnorm_bwd / layernorm_bwd, no autograd), which tells host time in the
autograd path from the kernels' time.

    PYTHONPATH=python python3 bench/torch_compare.py [--out docs] [--quick]
"""
import argparse
import csv
import os
import statistics
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

# (norm, dtype, feature, M, N): the perf-targets table.
RMS_N = [256, 1024, 2000, 2048, 4096, 8192, 16384, 32768, 65536]
CASES = [("rms", "bf16", "plain", 32768, n) for n in RMS_N] + [
    ("rms", "bf16", "plain", 16384, 131072),
    ("rms", "bf16", "plain", 8192, 262144),
    ("rms", "bf16", "plain", 131072, 4096),
    ("rms", "bf16", "plain", 65536, 8192),
] + [("ln", "bf16", "plain", 32768, n) for n in (1024, 4096, 8192)] + \
    [("rms", "bf16", "residual", 32768, n) for n in (1024, 4096, 8192)] + \
    [("rms", "fp32", "plain", 32768, n) for n in (1024, 4096, 8192)]
QUICK = [("rms", "bf16", "plain", 32768, n) for n in (1024, 4096)] + [("ln", "bf16", "plain", 32768, 4096)]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def elem(dtype):
    return torch.finfo(dtype).bits // 8


def bytes_moved(norm, feature, dtype, M, N, pas):
    e, mn = elem(dtype), M * N
    has_bias = norm == "ln"
    if pas == "fwd":
        b = 2 * mn * e + N * e * (2 if has_bias else 1)
        if feature == "residual":
            b += 2 * mn * e  # read residual, write residual_out
        return b
    b = 3 * mn * e + N * e + M * 4 + N * e  # x, dy, dx; weight; rstd; dweight
    if has_bias:
        b += M * 4 + N * e  # mean; dbias
    if feature == "residual":
        b += mn * e  # dresidual_out read (dresidual is dx when dtypes match)
    return b


class Timer:
    def __init__(self, device, reps):
        self.reps = reps
        self.flush = torch.empty(512 << 20, dtype=torch.uint8, device=device)

    def __call__(self, fn):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.reps):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)


def copy_bandwidth(timer, device):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    ms = timer(lambda: b.copy_(a))
    return 2 * n / (ms * 1e-3) / 1e9


def implementations(norm, feature, x, w, bias, res):
    """name -> (forward callable, make_backward() -> callable)."""
    import fusednorm

    N = x.shape[-1]
    eps = 1e-6 if norm == "rms" else 1e-5
    fn = fusednorm.rmsnorm if norm == "rms" else fusednorm.layernorm

    def torch_fwd(x_, w_, b_, r_):
        h = x_ + r_ if r_ is not None else x_
        y = F.rms_norm(h, (N,), w_, eps) if norm == "rms" else F.layer_norm(h, (N,), w_, b_, eps)
        return (y, h) if r_ is not None else y

    # Every case is its own static-shape compile: start from empty caches so the
    # recompile limit never sends a case back to eager.
    torch._dynamo.reset()
    compiled = torch.compile(torch_fwd, fullgraph=True, dynamic=False)

    def fused_fwd(x_, w_, b_, r_):
        if r_ is not None:
            return fn(x_, w_, b_, residual=r_, eps=eps, prenorm=True)
        return fn(x_, w_, b_, eps=eps)

    out = {}
    for name, f in (("fusednorm", fused_fwd), ("torch eager", torch_fwd), ("torch.compile", compiled)):
        def fwd(f=f):
            with torch.no_grad():
                return f(x, w, bias, res)

        def make_bwd(f=f):
            xs = x.detach().requires_grad_(True)
            ws = w.detach().requires_grad_(True)
            bs = bias.detach().requires_grad_(True) if bias is not None else None
            rs = res.detach().requires_grad_(True) if res is not None else None
            outs = f(xs, ws, bs, rs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            grads = [torch.randn_like(o) for o in outs]
            leaves = [t for t in (xs, ws, bs, rs) if t is not None]
            return lambda: torch.autograd.grad(outs, leaves, grads, retain_graph=True)

        out[name] = (fwd, make_bwd)

    # fusednorm's backward called directly (rmsnorm_bwd / layernorm_bwd), no
    # autograd: the same C call as the autograd backward, so a gap between
    # the two rows is host time of the autograd path landing in the timing.
    def make_explicit_bwd():
        if norm == "rms":
            y, res_out, rstd = fusednorm.rmsnorm_fwd(x, w, bias, residual=res, eps=eps, store_rstd=True)
            mean = None
        else:
            y, res_out, rstd, mean = fusednorm.layernorm_fwd(x, w, bias, residual=res, eps=eps, store_rstd=True)
        dy = torch.randn_like(y)
        dres_out = torch.randn_like(res_out) if res is not None else None
        xn = res_out if res is not None else x
        if norm == "rms":
            return lambda: fusednorm.rmsnorm_bwd(xn, w, dy, rstd, dresidual_out=dres_out, has_bias=bias is not None,
                                                 has_residual=res is not None, eps=eps)
        return lambda: fusednorm.layernorm_bwd(xn, w, dy, rstd, mean, dresidual_out=dres_out,
                                               has_bias=bias is not None, has_residual=res is not None, eps=eps)

    out["fusednorm explicit"] = (None, make_explicit_bwd)
    return out


def write_csv(out, rows, copy_gbs, device):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "torch_compare.csv")
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["norm", "dtype", "feature", "M", "N", "pass", "impl", "median_ms", "GBps", "pct_of_copy"])
        for r in rows:
            wr.writerow([r["norm"], r["dtype"], r["feature"], r["M"], r["N"], r["pass_"], r["impl"], r["ms"],
                         r["gbs"], r["pct_copy"]])
        f.write(f"# copy bandwidth {copy_gbs:.0f} GB/s, {torch.cuda.get_device_name(device)}\n")
    return path


def run(args):
    device = torch.device("cuda")
    timer = Timer(device, args.reps)
    copy_gbs = copy_bandwidth(timer, device)
    print(f"{torch.cuda.get_device_name(device)}; copy bandwidth {copy_gbs:.0f} GB/s; torch {torch.__version__}",
          flush=True)
    rows = []
    path = write_csv(args.out, rows, copy_gbs, device)
    cases = QUICK if args.quick else CASES
    if args.cols:
        keep = {int(n) for n in args.cols.split(",")}
        cases = [c for c in cases if c[4] in keep]
    # --repeat-first: the first case once more before the rest, printed and not
    # recorded, to tell a cold start (torch.compile's workers, the allocator,
    # the host's clocks) from the case's own speed.
    runs = [(c, False) for c in cases]
    if args.repeat_first and cases:
        runs.insert(0, (cases[0], True))
    for (norm, dts, feature, M, N), warm in runs:
        dtype = DT[dts]
        torch.manual_seed(0)
        x = torch.randn(M, N, device=device, dtype=dtype)
        w = (torch.randn(N, device=device) * 0.1 + 1).to(dtype)
        bias = torch.randn(N, device=device, dtype=dtype) * 0.1 if norm == "ln" else None
        res = torch.randn(M, N, device=device, dtype=dtype) if feature == "residual" else None
        for impl, (fwd, make_bwd) in implementations(norm, feature, x, w, bias, res).items():
            for pas in ("fwd", "bwd"):
                if pas == "fwd" and fwd is None:  # a backward-only row
                    continue
                try:
                    ms = timer(fwd if pas == "fwd" else make_bwd())
                except Exception as e:  # one failing peer (e.g. compile) must not end the run
                    print(f"  {impl} {pas} {norm} {feature} M={M} N={N}: failed: {e}", flush=True)
                    continue
                gbs = bytes_moved(norm, feature, dtype, M, N, pas) / (ms * 1e-3) / 1e9
                if warm:
                    print(f"(cold start, not recorded) {norm} {dts} {feature} M={M} N={N} {pas} {impl}: "
                          f"{ms:.4f} ms {gbs:.0f} GB/s", flush=True)
                    continue
                rows.append(dict(norm=norm, dtype=dts, feature=feature, M=M, N=N, pass_=pas, impl=impl,
                                 ms=f"{ms:.4f}", gbs=f"{gbs:.0f}", pct_copy=f"{100 * gbs / copy_gbs:.1f}"))
                print(f"{norm:3s} {dts:4s} {feature:8s} M={M:6d} N={N:6d} {pas} {impl:14s} "
                      f"{ms:8.4f} ms {gbs:6.0f} GB/s {100 * gbs / copy_gbs:5.1f}%", flush=True)
        del x, w, bias, res
        torch.cuda.empty_cache()
        # Rewritten after every shape, so a run cut short by a time limit keeps what it measured.
        path = write_csv(args.out, rows, copy_gbs, device)
    print(f"wrote {path}")
    plot(path, args.out)


def plot(csv_path, out_dir):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no chart. Later: python3 bench/torch_compare.py --plot {csv_path}")
        return
    with open(csv_path) as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    data = list(csv.DictReader(lines))
    panels = sorted({(r["norm"], r["dtype"], r["feature"]) for r in data})
    fig, axes = plt.subplots(len(panels), 2, figsize=(12, 3.6 * len(panels)), squeeze=False)
    for i, (norm, dts, feature) in enumerate(panels):
        for j, pas in enumerate(("fwd", "bwd")):
            ax = axes[i][j]
            sel = [r for r in data if (r["norm"], r["dtype"], r["feature"], r["pass"]) == (norm, dts, feature, pas)]
            for impl in sorted({r["impl"] for r in sel}):
                # The sweep over N (M <= 32768); the taller M=131072/65536 cases stay in the CSV only.
                pts = sorted((int(r["N"]), float(r["GBps"])) for r in sel if r["impl"] == impl
                             and int(r["M"]) <= 32768)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("N (cols)")
            ax.set_ylabel("GB/s")
            ax.set_title(f"{'RMSNorm' if norm == 'rms' else 'LayerNorm'} {dts} {feature} {pas}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(out_dir, exist_ok=True)
    png = os.path.join(out_dir, "torch_compare.png")
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(HERE, "..", "docs"), help="directory for the CSV and PNG")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="three shapes only (a smoke run)")
    p.add_argument("--cols", help="comma list: only the cases with these N (keeps a device call short)")
    p.add_argument("--repeat-first", action="store_true",
                   help="run the first case twice, the first time unrecorded (a cold start shows as a gap)")
    p.add_argument("--plot", metavar="CSV", help="only draw the chart of an existing CSV")
    args = p.parse_args()
    if args.plot:
        plot(args.plot, args.out)
        return
    if not torch.cuda.is_available():
        sys.exit("torch_compare.py measures on a GPU: torch.cuda.is_available() is False here")
    run(args)


if __name__ == "__main__":
    main()
