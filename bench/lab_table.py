#!/usr/bin/env python3
"""Side-by-side table of `fusednorm bench` runs, for A/B calls on the device.

Input: one file with sections, each a line "## <tag>" followed by the output
of one or more `fusednorm bench` runs (a variant: a build, a lab knob).
Output: one line per shape (norm dtype rows cols residual pass) and one column
per tag, each the % of the copy bandwidth measured in that run.

    { echo "## old"; FUSEDNORM_FWD_HELD=0 fusednorm bench ...; echo "## new"; fusednorm bench ...; } > ab.txt
    python3 bench/lab_table.py ab.txt
"""
import collections
import sys


def main(path):
    rows = collections.OrderedDict()
    tags = []
    tag = None
    with open(path) as f:
        for line in f:
            if line.startswith("## "):
                tag = line[3:].strip()
                tags.append(tag)
                continue
            fields = line.split()
            if len(fields) >= 9 and fields[5] in ("fwd", "bwd", "bwd-atomic"):
                rows.setdefault(" ".join(fields[:6]), {})[tag] = fields[8]
    width = max([7] + [len(t) + 1 for t in tags])
    print("%-38s" % "shape" + "".join(("%" + str(width) + "s") % t for t in tags))
    for shape, by_tag in rows.items():
        print("%-38s" % shape + "".join(("%" + str(width) + "s") % by_tag.get(t, "-") for t in tags))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
