#!/usr/bin/env python3
"""Where every performance target of ../shared/docs/perf-targets.md stands, from
`fusednorm bench --csv` files of one run on the GPU (bench/device.sh targets).

Targets (GB/s, bytes as perf-targets.md counts them), checked as the share of
the copy bandwidth they are of the 4.27 TB/s copy perf-targets.md quotes,
against the copy bandwidth measured in the same run:
  forward   3900 for 1024 <= N <= 262144, 3000 at N = 256
  backward  3700 for 2048 <= N <= 262144, 3000 at N = 1024, 2000 at N = 256
            (deterministic dweight; the atomic rows are reported apart)
The best alternative of perf-targets.md (measured there, not in this run) is
shown where it has one for the case; bench/torch_compare.py measures PyTorch's
in the same run.

    python3 bench/targets.py targets_*.csv [--copy-by-size FILE] [--launch-floor FILE]

Output: one matrix per pass (rows: norm, residual, dtype; columns: N; cells:
% of copy, '*' where short of the target), then every short case with its
GB/s, target and shortfall, and the GB/s a device-to-device copy of its own
bytes reaches: the bench's own measurement (`fusednorm bench
--same-size-copy`, CSV column same_copy_gbps) where the CSV has it, else
from --copy-by-size (the copy lines of the device_floors program of the same
run, interpolated in log size). A short problem moves too few bytes for the large
copy's rate. Rows of small
problems (M * N <= 2^20 elements) make a table of their own: median time
against the launch latency floor (--launch-floor: the output of the
device_floors program of the same run; the target: within 2 us of one launch;
the deterministic backward is two launches, whose floor is shown too).
The odd sizes perf-targets.md names (2000, 4097, 65537: "no cliff", within 10%
of their neighbours) make a table of their own: each against the faster of its
nearest multiples of 8 (a 16-byte boundary for 16-bit rows; 4096 and 65536
from the targets' rows), GB/s at the targets' M.
"""
import bisect
import csv
import math
import sys

COPY_REF = 4270.0  # GB/s: the copy bandwidth of perf-targets.md's H200

# perf-targets.md, "What the alternatives reach today" (bf16 unless noted, M = 32768)
BEST_ALT = {
    ("rms", "-", "bf16"): {256: (2221, 380), 1024: (3648, 1199), 2048: (3660, 1675), 4096: (4029, 3017),
                           8192: (4105, 2700), 16384: (4227, 3648), 32768: (3654, 1500), 65536: (2950, 1832),
                           131072: (2779, 1827), 262144: (2739, 1802)},
    ("ln", "-", "bf16"): {1024: (3623, 943), 4096: (3767, 2915), 8192: (4123, 2982)},
    ("rms", "res", "bf16"): {1024: (3073, 1453), 4096: (4136, 2651), 8192: (4157, 3692)},
    ("rms", "-", "f32"): {1024: (3933, 3418), 4096: (4247, 3877), 8192: (4294, 3961)},
}


def target(pas, n):
    """The target in GB/s of pass pas at N = n, or None."""
    if pas == "fwd":
        if n == 256:
            return 3000.0
        if 1024 <= n <= 262144:
            return 3900.0
    elif pas == "bwd":
        if n == 256:
            return 2000.0
        if n == 1024:
            return 3000.0
        if 2048 <= n <= 262144:
            return 3700.0
    return None


def load(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                if r.get("backend") != "cuda" or r.get("ok", "1") != "1":
                    continue
                rows.append(r)
    return rows


def load_copy_by_size(path):
    """[(bytes moved, GB/s)] from device_floors' copy lines, by size."""
    points = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and fields[0].isdigit():
                points.append((2.0 * int(fields[0]) * (1 << 20), float(fields[2])))
    return sorted(points)


def copy_at(points, moved):
    """The copy GB/s at moved bytes: log-linear between the measured sizes,
    the nearest one past either end."""
    sizes = [p[0] for p in points]
    i = bisect.bisect_left(sizes, moved)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (a, ga), (b, gb) = points[i - 1], points[i]
    t = (math.log(moved) - math.log(a)) / (math.log(b) - math.log(a))
    return ga + t * (gb - ga)


def load_launch_floor(path):
    """(one launch, two launches) in us from device_floors' launch_floor_us line, or None."""
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and fields[0] == "launch_floor_us":
                return float(fields[1]), float(fields[2])
    return None


# perf-targets.md's odd sizes and the neighbours each is held against
CLIFF = {2000: (1992, 2008), 4097: (4096, 4104), 65537: (65536, 65544)}
CLIFF_SIZES = frozenset(n for odd, nb in CLIFF.items() for n in (odd,) + nb)
SMALL_ELEMENTS = 1 << 20  # perf-targets.md: small problems are M * N <= 1M elements
SMALL_SLACK_US = 2.0


def option(argv, name):
    """(value of --name FILE or None, argv without it); exits on a missing value."""
    if name not in argv:
        return None, argv
    i = argv.index(name)
    if i + 1 >= len(argv):
        print("targets: %s needs a file" % name, file=sys.stderr)
        sys.exit(2)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv):
    copy_file, argv = option(argv, "--copy-by-size")
    floor_file, argv = option(argv, "--launch-floor")
    copy_points = load_copy_by_size(copy_file) if copy_file else []
    floor = load_launch_floor(floor_file) if floor_file else None
    paths = [a for a in argv if not a.startswith("--")]
    if not paths:
        print(__doc__.strip())
        return 2
    rows = load(paths)
    if not rows:
        print("targets: no CUDA rows in " + ", ".join(paths), file=sys.stderr)
        return 1
    small = []  # rows of small problems: (pass, norm, res, dtype, m, n, us, a copy of the bytes in us or None)
    cases = {}  # (pass, norm, res, dtype) -> {n: (gbps, pct, bytes, same-size copy gbps)}: the targets' shapes
    pairs = {}  # (norm, res, dtype, rows, cols) -> {pass: gbps}: deterministic against atomic
    cliff = {}  # (pass, norm, res, dtype) -> {n: gbps} at the targets' M, every N
    for r in rows:
        res = {"0": "-", "1": "res", "2": "res-nodr"}.get(r["residual"], r["residual"])
        m, n = int(r["rows"]), int(r["cols"])
        if r["pass"].startswith("bwd"):
            pairs.setdefault((r["norm"], res, r["dtype"], m, n), {})[r["pass"]] = float(r["gbps"])
        if m * n <= SMALL_ELEMENTS:
            # a copy of the problem's bytes, timed the same way: the bench's own (--same-size-copy),
            # else device_floors' curve (--copy-by-size); bytes / (GB/s * 1e3) = us
            same = r.get("same_copy_gbps") or ""
            copy_gbps = float(same) if same else copy_at(copy_points, float(r["bytes"])) if copy_points else None
            copy_us = float(r["bytes"]) / (copy_gbps * 1e3) if copy_gbps else None
            small.append((r["pass"], r["norm"], res, r["dtype"], m, n, float(r["median_us"]), copy_us))
            continue
        if m != (32768 if n < 65536 else (1 << 30) // n):  # the targets' M (perf-targets.md)
            continue
        if r["pass"] != "bwd-atomic":
            cliff.setdefault((r["pass"], r["norm"], res, r["dtype"]), {})[n] = float(r["gbps"])
        if n in CLIFF_SIZES and n & (n - 1):  # the odd sizes and their neighbours but 4096, 65536: cliff table only
            continue
        key = (r["pass"], r["norm"], res, r["dtype"])
        same = r.get("same_copy_gbps") or ""
        cases.setdefault(key, {})[n] = (float(r["gbps"]), float(r["pct_copy"]), float(r["bytes"]),
                                        float(same) if same else None)
    copies = sorted(float(r["copy_gbps"]) for r in rows)
    print("copy bandwidth measured in the run: %.0f-%.0f GB/s; targets as %% of %.0f GB/s (perf-targets.md)"
          % (copies[0], copies[-1], COPY_REF))
    short = []
    met = total = 0
    for pas in ("fwd", "bwd", "bwd-atomic"):
        keys = sorted(k for k in cases if k[0] == pas)
        if not keys:
            continue
        ns = sorted({n for k in keys for n in cases[k]})
        print()
        print("| %s | " % pas + " | ".join(str(n) for n in ns) + " |")
        print("| --- | " + " | ".join("---:" for _ in ns) + " |")
        for k in keys:
            cells = []
            for n in ns:
                if n not in cases[k]:
                    cells.append("")
                    continue
                gbps, pct, moved, same = cases[k][n]
                t = target(pas, n) if pas != "bwd-atomic" else None
                mark = ""
                if t is not None:
                    total += 1
                    need = 100.0 * t / COPY_REF
                    if pct + 1e-9 >= need:
                        met += 1
                    else:
                        mark = "*"
                        alt = BEST_ALT.get(k[1:], {}).get(n)
                        alt_v = None if alt is None else alt[0 if pas == "fwd" else 1]
                        if same is None and copy_points:
                            same = copy_at(copy_points, moved)
                        short.append((k, n, gbps, pct, t, need, alt_v, same))
                cells.append("%.1f%s" % (pct, mark))
            print("| " + label(k) + " | " + " | ".join(cells) + " |")
    print()
    print("%d of %d targets met (%% of copy; '*' short)" % (met, total))
    if short:
        print()
        with_same = any(c[7] is not None for c in short)
        print("| pass | case | N | GB/s | % of copy | target % | short by (points) |" +
              (" same-size copy GB/s | % of it |" if with_same else "") + " perf-targets' best alternative GB/s |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if with_same else "") + " ---: |")
        for k, n, gbps, pct, t, need, alt, same in short:
            extra = ""
            if with_same:
                extra = " - | - |" if same is None else " %.0f | %.1f |" % (same, 100.0 * gbps / same)
            print("| %s | %s | %d | %.0f | %.1f | %.1f | %.1f |%s %s |"
                  % (k[0], label(k), n, gbps, pct, need, need - pct, extra,
                     "-" if alt is None else "%d%s" % (alt, " (ahead)" if gbps >= alt else " (behind)")))
    if small:
        print()
        if floor:
            print("Small problems (M * N <= 2^20): median time against the launch floor (one empty launch"
                  " %.2f us, two %.2f us); the target: within %.0f us of one launch" % (floor[0], floor[1], SMALL_SLACK_US))
        else:
            print("Small problems (M * N <= 2^20): median time (no launch floor given: --launch-floor)")
        print()
        print("| pass | case | M | N | us | over one launch (us) | over the pass's launches (us) | within target |"
              " a copy of its bytes (us) |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        within = 0
        for pas, norm, res, dt, m, n, us, copy_us in sorted(small, key=lambda t: t[:7]):
            copy = "-" if copy_us is None else "%.2f" % copy_us
            if floor:
                launches = floor[1] if pas == "bwd" else floor[0]  # the deterministic backward: rows + finalize
                ok = us <= floor[0] + SMALL_SLACK_US
                within += ok
                print("| %s | %s | %d | %d | %.2f | %.2f | %.2f | %s | %s |"
                      % (pas, label((pas, norm, res, dt)), m, n, us, us - floor[0], us - launches, "yes" if ok else "NO",
                         copy))
            else:
                print("| %s | %s | %d | %d | %.2f | - | - | - | %s |" % (pas, label((pas, norm, res, dt)), m, n, us, copy))
        if floor:
            print()
            print("%d of %d small problems within %.0f us of one launch" % (within, len(small), SMALL_SLACK_US))
    odd = [(k, n) for k in sorted(cliff) for n in sorted(CLIFF) if n in cliff[k]
           and any(b in cliff[k] for b in CLIFF[n])]
    if odd:
        print()
        print("Odd sizes against their neighbours (GB/s at the targets' M; the target: within 10% of the faster"
              " neighbour)")
        print()
        print("| pass | case | N | GB/s | neighbours (GB/s) | N / faster | within target |")
        print("| --- | --- | ---: | ---: | --- | ---: | --- |")
        ok_n = 0
        for k, n in odd:
            nb = [(b, cliff[k][b]) for b in CLIFF[n] if b in cliff[k]]
            best = max(g for _, g in nb)
            ratio = cliff[k][n] / best
            ok_n += ratio >= 0.9
            print("| %s | %s | %d | %.0f | %s | %.3f | %s |" % (k[0], label(k), n, cliff[k][n],
                  ", ".join("%d: %.0f" % bg for bg in nb), ratio, "yes" if ratio >= 0.9 else "NO"))
        print()
        print("%d of %d odd sizes within 10%% of their neighbours" % (ok_n, len(odd)))
    atomic = sorted(k for k, v in pairs.items() if "bwd" in v and "bwd-atomic" in v)
    if atomic:
        print()
        print("Deterministic against atomic dweight (backward GB/s; the target: deterministic within 3% of"
              " atomic wherever atomic is faster)")
        print()
        print("| case | M | N | deterministic | atomic | det / atomic | within target |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for k in atomic:
            d, a = pairs[k]["bwd"], pairs[k]["bwd-atomic"]
            ok = "yes" if d >= 0.97 * a else "NO"
            print("| %s | %d | %d | %.0f | %.0f | %.3f | %s |" % (label(("",) + k[:3]), k[3], k[4], d, a, d / a, ok))
    return 0


def label(k):
    """norm dtype [res]: the case of key (pass, norm, res, dtype)."""
    return " ".join(x for x in (k[1], k[3], "" if k[2] == "-" else k[2]) if x)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
