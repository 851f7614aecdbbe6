"""bench/targets.py: which cases meet perf-targets.md's targets, read from
`fusednorm bench --csv` rows (written here, so that the expected answers are
known), the copy-by-size interpolation, the small-problem and the atomic
tables."""
import csv
import importlib.util
import io
import os
from contextlib import redirect_stdout

HERE = os.path.dirname(__file__)
spec = importlib.util.spec_from_file_location("targets", os.path.join(HERE, "..", "..", "bench", "targets.py"))
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)

FIELDS = ["backend", "device", "norm", "dtype", "rows", "cols", "residual", "bias", "pass", "iters", "bytes",
          "median_us", "gbps", "copy_gbps", "pct_copy", "ok"]


def row(pas, n, pct, m=None, norm="rms", dtype="bf16", residual=0, us=10.0, gbps=None, backend="cuda"):
    m = m if m is not None else (32768 if n < 65536 else (1 << 30) // n)
    copy = 4200.0
    return {"backend": backend, "device": "H200", "norm": norm, "dtype": dtype, "rows": m, "cols": n,
            "residual": residual, "bias": 0, "pass": pas, "iters": 100, "bytes": 4 * m * n, "median_us": us,
            "gbps": gbps if gbps is not None else copy * pct / 100.0, "copy_gbps": copy, "pct_copy": pct, "ok": 1}


def run(tmp_path, rows, *extra):
    path = tmp_path / "t.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = targets.main([str(path)] + [str(e) for e in extra])
    return rc, out.getvalue()


def test_targets_by_pass_and_n():
    # forward: 3900 GB/s at 1024..262144, 3000 at 256; backward: 3700 from 2048, 3000 at 1024, 2000 at 256
    assert targets.target("fwd", 256) == 3000.0
    assert targets.target("fwd", 1024) == 3900.0 and targets.target("fwd", 262144) == 3900.0
    assert targets.target("fwd", 512) is None and targets.target("fwd", 524288) is None
    assert targets.target("bwd", 256) == 2000.0 and targets.target("bwd", 1024) == 3000.0
    assert targets.target("bwd", 2048) == 3700.0 and targets.target("bwd", 1536) is None


def test_met_and_short_cases(tmp_path):
    need = 100.0 * 3900.0 / targets.COPY_REF  # 91.3% of copy
    rows = [row("fwd", 4096, need + 0.1), row("fwd", 8192, need - 0.1), row("bwd", 256, 40.0),
            row("bwd", 2048, 90.0), row("fwd", 4096, 99.0, backend="cpu")]  # the CPU row is not a target
    rc, out = run(tmp_path, rows)
    assert rc == 0
    assert "2 of 4 targets met" in out
    assert "| rms bf16 | %.1f | %.1f* |" % (need + 0.1, need - 0.1) in out  # the forward row: 4096, 8192
    short = [l for l in out.splitlines() if l.startswith("| fwd | rms bf16 | 8192 |") or
             l.startswith("| bwd | rms bf16 | 256 |")]
    assert len(short) == 2  # both listed with their shortfall
    assert "| 0.1 |" in short[0] or "| 0.1 |" in short[1]


def test_rows_outside_the_targets_shapes_stay_out_of_the_matrix(tmp_path):
    # M = 4096 at N = 4096 is neither the targets' M nor a small problem
    rc, out = run(tmp_path, [row("fwd", 4096, 50.0, m=4096)])
    assert rc == 0 and "0 of 0 targets met" in out


def test_copy_by_size_interpolation(tmp_path):
    p = tmp_path / "copy.txt"
    p.write_text("     MiB         us       GB/s\n       16      12.38     2000.0\n       64      35.52     4000.0\n")
    points = targets.load_copy_by_size(str(p))
    assert points == [(2.0 * 16 * (1 << 20), 2000.0), (2.0 * 64 * (1 << 20), 4000.0)]
    assert targets.copy_at(points, 2.0 * 16 * (1 << 20)) == 2000.0
    assert abs(targets.copy_at(points, 2.0 * 32 * (1 << 20)) - 3000.0) < 1e-9  # halfway in log size
    assert targets.copy_at(points, 1.0) == 2000.0 and targets.copy_at(points, 1e12) == 4000.0
    # a short case gets the copy of its own bytes (4 * 32768 * 256 bytes moved = a 16 MiB copy)
    rc, out = run(tmp_path, [row("fwd", 256, 50.0, gbps=1500.0)], "--copy-by-size", p)
    assert rc == 0
    assert "| 2000 | 75.0 |" in out


def test_the_bench_measurement_of_a_same_size_copy_comes_first(tmp_path):
    p = tmp_path / "copy.txt"
    p.write_text("       16      12.38     2000.0\n       64      35.52     4000.0\n")
    r = row("fwd", 256, 50.0, gbps=1500.0)
    r["same_copy_gbps"], r["pct_same_copy"] = 2500.0, 60.0
    FIELDS.extend(["same_copy_gbps", "pct_same_copy"])
    try:
        rc, out = run(tmp_path, [r], "--copy-by-size", p)
    finally:
        del FIELDS[-2:]
    assert rc == 0
    assert "| 2500 | 60.0 |" in out  # the bench's measurement, not the interpolated 2000


def test_small_problems_against_the_launch_floor(tmp_path):
    p = tmp_path / "floor.txt"
    p.write_text("launch_floor_us 2.50 4.00\n")
    assert targets.load_launch_floor(str(p)) == (2.5, 4.0)
    rows = [row("fwd", 1024, 10.0, m=1024, us=4.4), row("bwd", 4096, 10.0, m=256, us=4.6)]
    rc, out = run(tmp_path, rows, "--launch-floor", p)
    assert rc == 0
    assert "| fwd | rms bf16 | 1024 | 1024 | 4.40 | 1.90 | 1.90 | yes | - |" in out
    assert "| bwd | rms bf16 | 256 | 4096 | 4.60 | 2.10 | 0.60 | NO | - |" in out  # the backward: two launches
    assert "1 of 2 small problems within 2 us of one launch" in out


def test_small_problems_against_a_copy_of_their_bytes(tmp_path):
    """The bench's own same-size copy where the CSV has it, else device_floors' curve."""
    p = tmp_path / "floor.txt"
    # copies of 2 MiB (4 MiB moved) at 1000 GB/s, 4 MiB at 2000: 4 MiB moved / 1000 GB/s = 4.19 us
    p.write_text("     MiB         us       GB/s\n       2       4.19     1000.0\n       4       4.19     2000.0\n"
                 "launch_floor_us 2.50 4.00\n")
    rows = [row("fwd", 1024, 10.0, m=1024, us=6.0), row("bwd", 4096, 10.0, m=256, us=9.0)]
    for r in rows:
        r["bytes"] = str(4 << 20)
    FIELDS.extend(["same_copy_gbps", "pct_same_copy"])
    try:
        rows[1]["same_copy_gbps"], rows[1]["pct_same_copy"] = "2000", "50"
        rows[0]["same_copy_gbps"], rows[0]["pct_same_copy"] = "", ""
        rc, out = run(tmp_path, rows, "--launch-floor", p, "--copy-by-size", p)
    finally:
        del FIELDS[-2:]
    assert rc == 0
    assert "| fwd | rms bf16 | 1024 | 1024 | 6.00 | 3.50 | 3.50 | NO | 4.19 |" in out  # the curve at 4 MiB
    assert "| bwd | rms bf16 | 256 | 4096 | 9.00 | 6.50 | 5.00 | NO | 2.10 |" in out  # the bench's copy


def test_deterministic_against_atomic(tmp_path):
    rows = [row("bwd", 2048, 0, m=4096, gbps=1000.0), row("bwd-atomic", 2048, 0, m=4096, gbps=1020.0),
            row("bwd", 8192, 0, m=4096, gbps=1000.0), row("bwd-atomic", 8192, 0, m=4096, gbps=1040.0)]
    rc, out = run(tmp_path, rows)
    assert rc == 0
    assert "| rms bf16 | 4096 | 2048 | 1000 | 1020 | 0.980 | yes |" in out
    assert "| rms bf16 | 4096 | 8192 | 1000 | 1040 | 0.962 | NO |" in out


def test_one_device_floors_file_feeds_both_readings(tmp_path):
    # device_floors prints the copy lines, then the launch floor: each reader takes its own lines
    p = tmp_path / "floors.txt"
    p.write_text("     MiB         us       GB/s\n       16      12.38     2000.0\n       64      35.52     4000.0\n"
                 "launch_floor_us 2.50 4.00\n")
    assert targets.load_copy_by_size(str(p)) == [(2.0 * 16 * (1 << 20), 2000.0), (2.0 * 64 * (1 << 20), 4000.0)]
    assert targets.load_launch_floor(str(p)) == (2.5, 4.0)


def test_odd_sizes_against_their_neighbours(tmp_path):
    """2000, 4097 and 65537 each against the faster of its neighbours (within 10%), at the targets'
    M; the odd sizes and their neighbours stay out of the targets' matrix and count."""
    rows = [row("fwd", 1992, 0, gbps=3000.0), row("fwd", 2000, 0, gbps=2750.0), row("fwd", 2008, 0, gbps=3100.0),
            row("fwd", 4096, 90.0, gbps=4000.0), row("fwd", 4097, 0, gbps=3500.0),
            row("bwd", 65536, 95.0, gbps=4000.0), row("bwd", 65537, 0, gbps=3650.0),
            row("fwd", 65537, 0, m=4096, gbps=100.0),  # not the targets' M (16383): left out
            row("bwd", 3072, 95.0)]  # any other N at the targets' M (TARGET_COLS=...) stays a target
    rc, out = run(tmp_path, rows)
    assert rc == 0
    assert "| fwd | rms bf16 | 2000 | 2750 | 1992: 3000, 2008: 3100 | 0.887 | NO |" in out
    assert "| fwd | rms bf16 | 4097 | 3500 | 4096: 4000 | 0.875 | NO |" in out
    assert "| bwd | rms bf16 | 65537 | 3650 | 65536: 4000 | 0.912 | yes |" in out
    assert "1 of 3 odd sizes within 10% of their neighbours" in out
    assert "2 of 3 targets met" in out  # 4096 fwd (90.0 < 91.3) short, 3072 and 65536 bwd met; no odd size
    assert "| fwd | 4096 |" in out and "2000" not in out.split("Odd sizes")[0]
