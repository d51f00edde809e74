"""Figures in the paper's shapes, with bootstrap 95 % bands (matplotlib, Agg backend)."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _series(summary: list[dict], key: str, group: str) -> dict:
    out: dict = {}
    for row in summary:
        out.setdefault(row.get(group, row["policy"]), []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: r["rps"])
    return out


def _band(ax, rows: list[dict], x: str, key: str, scale: float, label: str) -> None:
    """One line (the mean) with its bootstrap 95 % band, rows sorted by ``x``."""
    rows = sorted(rows, key=lambda r: r[x])
    xs = [r[x] for r in rows]
    (line,) = ax.plot(xs, [scale * r[key]["mean"] for r in rows], marker="o", label=label)
    ax.fill_between(xs, [scale * r[key]["ci95"][0] for r in rows], [scale * r[key]["ci95"][1] for r in rows],
                    color=line.get_color(), alpha=0.2)


def _save(fig, axes, path: str, title: str, legend_loc: str) -> str:
    axes[-1].legend(fontsize=8, loc=legend_loc, framealpha=0.8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def attainment_vs_x(summary: list[dict], path: str, title: str, group: str = "policy", x: str = "rps",
                    xlabel: str = "requests per second") -> str:
    """Two panels (TTFT and TBT attainment) against ``x``, one line with a band per ``group``."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    for ax, key, label in ((axes[0], "ttft_attainment", "TTFT attainment"), (axes[1], "tbt_attainment", "TBT attainment")):
        for name, rows in _series(summary, key, group).items():
            _band(ax, rows, x, key, 100, str(name))
        ax.set_ylabel(f"{label} (%)")
        ax.set_xlabel(xlabel)
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    return _save(fig, axes, path, title, "lower left")


def metric_vs_x(summary: list[dict], path: str, title: str, keys: tuple[str, ...], x: str, xlabel: str,
                group: str = "policy") -> str:
    """One panel per metric key against ``x`` (sweeps of α, δ, B_xfer), bands from the CI."""
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.6))
    axes = axes if len(keys) > 1 else [axes]
    for ax, key in zip(axes, keys):
        scale = 100 if "attainment" in key or key == "stall_share" else 1
        for name, rows in _series(summary, key, group).items():
            _band(ax, rows, x, key, scale, str(name))
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    return _save(fig, axes, path, title, "best")
