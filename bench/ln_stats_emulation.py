#!/usr/bin/env python3
"""fp32 emulation (numpy) of the streaming forward's LayerNorm statistics
(src/cuda/common.cuh: ShiftedSums, merge_mean_m2, cta_allmerge), to measure
their rounding error against fp64 on rows with outliers, without a GPU.

Each of T = 512 threads takes vectors t, t + T, ... of the row (VEC elements:
8 for bf16, 4 for fp32), sums (h - k) and (h - k)^2 in fp32 in that order,
turns them into (count, mean, M2), and the CTA merges lanes, then warps, by
butterflies (the lower operand first). The shift k is the thread's first value
("first", main as of session 8) or its first vector's mean ("vecmean",
branch wip/ln-outlier). Prints rstd's error in units of 2^-24 against the
tests' tolerance u * (4 + 4 * sqrt(N)) (tests/opcase.c).

    python3 bench/ln_stats_emulation.py            # about a minute per row length
"""
import numpy as np

f = np.float32


def stats(x, vec, shift, threads=512):
    nv = x.size // vec
    xv = x.reshape(nv, vec).astype(f)
    k = np.zeros(threads, f)
    s1 = np.zeros(threads, f)
    s2 = np.zeros(threads, f)
    n = np.zeros(threads, np.int64)
    for v0 in range(0, nv, threads):
        for t in range(threads):
            v = v0 + t
            if v >= nv:
                continue
            h = xv[v]
            if n[t] == 0:
                k[t] = h[0] if shift == "first" else f(np.sum(h, dtype=f) * f(1.0 / vec))
            for j in range(vec):
                d = f(h[j] - k[t])
                s1[t] = f(s1[t] + d)
                s2[t] = f(s2[t] + f(d * d))
            n[t] += vec
    per_thread = []
    for t in range(threads):
        if n[t] == 0:
            per_thread.append((f(0), f(0), f(0)))
            continue
        inv = f(1.0) / f(n[t])
        per_thread.append((f(n[t]), f(k[t] + f(s1[t] * inv)), max(f(s2[t] - f(f(s1[t] * s1[t]) * inv)), f(0))))

    def merge(a, b):
        if b[0] == 0:
            return a
        if a[0] == 0:
            return b
        nn = f(a[0] + b[0])
        d = f(b[1] - a[1])
        fb = f(b[0] / nn)
        return (nn, f(a[1] + f(d * fb)), f(f(a[2] + b[2]) + f(f(f(d * d) * a[0]) * fb)))

    def butterfly(vs):
        off = len(vs) // 2
        while off > 0:
            vs = [merge(vs[i ^ off], vs[i]) if i & off else merge(vs[i], vs[i ^ off]) for i in range(len(vs))]
            off //= 2
        return vs[0]

    warps = [butterfly(per_thread[w * 32:(w + 1) * 32]) for w in range(threads // 32)]
    warps += [(f(0), f(0), f(0))] * (32 - len(warps))
    return butterfly(warps)


def main():
    rng = np.random.default_rng(7)
    for dt, vec, cols in (("bf16", 8, 131072), ("bf16", 8, 262144), ("f32", 4, 131072), ("f32", 4, 262144)):
        for big in (2.0 ** 17, 1e6):
            x = rng.uniform(-2, 2, cols)
            if dt == "bf16":
                x = (x.astype(f).view(np.uint32) & 0xFFFF0000).view(f).astype(np.float64)
            x[0], x[8] = big, -big / 2
            mean = x.mean()
            rstd = 1 / np.sqrt(((x - mean) ** 2).sum() / cols + 1e-5)
            errs = []
            for shift in ("first", "vecmean"):
                m2 = float(stats(x.astype(f), vec, shift)[2])
                errs.append(abs(1 / np.sqrt(m2 / cols + 1e-5) - rstd) / rstd / 2.0 ** -24)
            print(f"{dt:4s} N={cols:6d} outlier {big:9.0f}: rstd error first {errs[0]:6.0f}, vecmean {errs[1]:4.0f}"
                  f" (tolerance {4 + 4 * np.sqrt(cols):.0f})", flush=True)


if __name__ == "__main__":
    main()
