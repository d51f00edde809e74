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


def attainment_vs_x(summary: list[dict], path: str, title: str, group: str = "policy", x: str = "rps",
                    xlabel: str = "requests per second") -> str:
    """Two panels (TTFT and TBT attainment) against ``x``, one line with a band per ``group``."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharex=True)
    for ax, key, label in ((axes[0], "ttft_attainment", "TTFT attainment"), (axes[1], "tbt_attainment", "TBT attainment")):
        for name, rows in _series(summary, key, group).items():
            xs = [r[x] for r in rows]
            mean = [100 * r[key]["mean"] for r in rows]
            lo = [100 * r[key]["ci95"][0] for r in rows]
            hi = [100 * r[key]["ci95"][1] for r in rows]
            (line,) = ax.plot(xs, mean, marker="o", label=str(name))
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2)
        ax.set_ylabel(f"{label} (%)")
        ax.set_xlabel(xlabel)
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower left", framealpha=0.8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def metric_vs_x(summary: list[dict], path: str, title: str, keys: tuple[str, ...], x: str, xlabel: str,
                group: str = "policy") -> str:
    """One panel per metric key against ``x`` (sweeps of α, δ, B_xfer), bands from the CI."""
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.6))
    axes = axes if len(keys) > 1 else [axes]
    for ax, key in zip(axes, keys):
        for name, rows in _series(summary, key, group).items():
            rows = sorted(rows, key=lambda r: r[x])
            xs = [r[x] for r in rows]
            scale = 100 if "attainment" in key or key == "stall_share" else 1
            mean = [scale * r[key]["mean"] for r in rows]
            lo = [scale * r[key]["ci95"][0] for r in rows]
            hi = [scale * r[key]["ci95"][1] for r in rows]
            (line,) = ax.plot(xs, mean, marker="o", label=str(name))
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8, loc="best", framealpha=0.8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
