"""Bar chart of a ``bench kv --json`` result: ``python -m superinfer.bench.kv.plot IN.json OUT.png``."""

from __future__ import annotations

import json
import sys


def plot(result: dict, path: str) -> None:
    """Time per row (ms) with its ratio to the yardstick (``/copy_`` on CPU, ``/ideal`` on GPU)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    cpu = result["device"] == "cpu"
    key, label = ("ratio_to_copy", "/copy_") if cpu else ("ratio_to_ideal", "/ideal")
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bars = ax.bar([r["row"] for r in rows], [r["ms"] for r in rows], color="#4C72B0")
    for bar, r in zip(bars, rows):
        if key in r:
            ax.annotate(f"{r[key]:.2f}{label}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("ms (median)")
    ax.set_title(f"bench kv: {result['model']}, {result['bytes_each_way'] >> 20} MiB each way, {result['device_name']}",
                 fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m superinfer.bench.kv.plot IN.json OUT.png", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        plot(json.load(f), args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
