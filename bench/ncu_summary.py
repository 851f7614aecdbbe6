#!/usr/bin/env python3
"""Summarize an Nsight Compute source-page CSV (SASS with per-instruction
counters), as written by `bench/device.sh ncu` (ncu_<pass>_source.csv):

  - instructions executed per element (warp instructions x 32 / elements),
  - executed instructions and stall samples per opcode, largest first,
  - the instructions with the most stall samples.

    python3 bench/ncu_summary.py ncu_fwd_4096_source.csv --elements $((32768*4096))

Reads the file only; prints to stdout.
"""
import argparse
import collections
import csv
import sys


def number(text):
    text = text.replace(",", "")
    return int(text) if text.isdigit() else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--elements", type=int, default=0, help="elements the kernel processed (rows * cols)")
    ap.add_argument("--ops", type=int, default=24, help="opcodes to list")
    ap.add_argument("--top", type=int, default=20, help="instructions with the most stall samples to list")
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    # The first line names the kernel; the header follows.
    head = next((i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r), None)
    if head is None:
        sys.exit(f"{args.csv}: no header with 'Source' and 'Instructions Executed'")
    hdr, data = rows[head], rows[head + 1:]
    name = [c for c in rows[0][1:] if c] if head > 0 else []
    if name:
        print("kernel:", name[0])
    i_src, i_exec = hdr.index("Source"), hdr.index("Instructions Executed")
    i_stall = hdr.index("Warp Stall Sampling (All Samples)") if "Warp Stall Sampling (All Samples)" in hdr else None

    executed, stalls = collections.Counter(), collections.Counter()
    for r in data:
        words = r[i_src].split() if len(r) > i_src else []
        if not words:
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        op = op.split(".")[0]
        executed[op] += number(r[i_exec])
        if i_stall is not None:
            stalls[op] += number(r[i_stall])
    total = sum(executed.values())
    samples = sum(stalls.values())
    print(f"warp instructions executed: {total}; stall samples: {samples}")
    if args.elements:
        print(f"thread instructions per element: {total * 32 / args.elements:.2f}")
    print(f"{'opcode':10s} {'executed':>12s} {'share':>6s} {'stalls':>7s}")
    for op, n in executed.most_common(args.ops):
        per = f" {n * 32 / args.elements:6.2f}/elem" if args.elements else ""
        print(f"{op:10s} {n:12d} {100 * n / max(total, 1):5.1f}% {stalls[op]:7d}{per}")
    if i_stall is not None:
        print("instructions with the most stall samples:")
        for r in sorted(data, key=lambda r: -number(r[i_stall]) if len(r) > i_stall else 0)[:args.top]:
            print(f"{number(r[i_stall]):7d} {number(r[i_exec]):10d}  {r[i_src].strip()[:80]}")


if __name__ == "__main__":
    main()
