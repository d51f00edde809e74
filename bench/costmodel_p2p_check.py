"""Is NCCL's tuning model (``superinfer.sim.fabric.send_s``) good enough for pipeline hops? Scores it against
Vidur's measured point-to-point sends (``data/profiling/network/<fabric>/send_recv.csv`` in
github.com/microsoft/vidur, MIT; not shipped with superinfer, so the path is an argument).

    .venv/bin/python bench/costmodel_p2p_check.py VIDUR_REPO/data/profiling/network

Rows with ``devices_per_node`` 2 are two GPUs in one node (priced on the fabric's innermost link), 1 two
nodes (priced on its outermost). Prints, per folder and size band, rows, median absolute error and median
signed error (positive: the twin is too slow).
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from superinfer.sim.fabric import get_fabric, send_s

#: Vidur's network folders with send_recv.csv -> the twin's (hardware, fabric) they were measured on
CASES = {"h100_dgx": ("h100-sxm", "dgx-h100"), "a100_pairwise_nvlink": ("a100-pcie", "nvlink-bridge")}
MIB = 1 << 20


def main(root: Path) -> None:
    for folder, (hardware, fabric_name) in CASES.items():
        fabric = get_fabric(hardware, fabric_name)
        with open(root / folder / "send_recv.csv") as f:
            rows = list(csv.DictReader(f))
        for dpn, link in ((2, fabric.tiers[0].link), (1, fabric.tiers[-1].link)):
            for name, small in (("<1MiB", True), (">=1MiB", False)):
                errs = []
                for r in rows:
                    size = int(r["size"])
                    if int(r["devices_per_node"]) != dpn or (size < MIB) != small:
                        continue
                    ms = float(r["time_stats.send_recv.median"]) / 1e3
                    errs.append((send_s(size, link) - ms) / ms)
                if errs:
                    print(f"{folder:<22} {'one node' if dpn == 2 else 'two nodes':<10} {link.name:<20} {name:<7} "
                          f"{len(errs):>4} rows  median error {100 * statistics.median(map(abs, errs)):5.1f} %  "
                          f"bias {100 * statistics.median(errs):+6.1f} %")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
