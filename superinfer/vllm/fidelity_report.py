"""Summaries, the text table and the CDF plots of ``superinferd bench fidelity``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.vllm.fidelity_twin import errors

ERROR_KEYS = ("ttft_p50_pct", "ttft_p90_pct", "tbt_p50_pct", "tbt_p90_pct", "mape_pct", "ttft_attainment_pp",
              "tbt_attainment_pp", "slo_attainment_pp")


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def summarise_fidelity(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    """Per (policy, rps): mean errors over seeds (attainment errors as mean absolute points); per variant the
    same for the ablation; per rate whether the twin picks the engine's winner on ``slo_attainment``."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["policy"], r["rps"]), []).append(r)
    points = []
    for (policy, rps), rs in groups.items():
        row: dict[str, Any] = {"policy": policy, "rps": rps, "seeds": len(rs)}
        for name in variants:
            errs = [r["error"] if name == "all" else r["ablation"][name]["error"] for r in rs]
            row[name] = {k: _mean([abs(e[k]) for e in errs]) for k in ERROR_KEYS}
        for side in ("real", "twin"):
            row[side] = {k: _mean([r[side][k] for r in rs]) for k in ("slo_attainment", "ttft_attainment",
                                                                      "tbt_attainment", "ttft_p90_s", "tbt_p90_s")}
        floor = [errors(r["real"], again) for r in rs for again in r.get("real_repeats", [])]
        if floor:  # the engine's first run against its repeats, the same measures as the twin's error
            row["noise_floor"] = {k: _mean([abs(e[k]) for e in floor]) for k in ERROR_KEYS}
            row["noise_floor"]["pairs"] = len(floor)
        points.append(row)
    winners = []
    for rps in sorted({p["rps"] for p in points}):
        at = [p for p in points if p["rps"] == rps]
        if len(at) > 1:
            real = max(at, key=lambda p: p["real"]["slo_attainment"])["policy"]
            twin = max(at, key=lambda p: p["twin"]["slo_attainment"])["policy"]
            winners.append({"rps": rps, "real": real, "twin": twin, "agree": real == twin})
    out = {"points": points, "winners": winners,
           "mape_pct": {name: _mean([p[name]["mape_pct"] for p in points]) for name in variants}}
    floored = [p for p in points if "noise_floor" in p]
    if floored:
        out["noise_floor"] = {"mape_pct": _mean([p["noise_floor"]["mape_pct"] for p in floored]),
                              "slo_attainment_pp": _mean([p["noise_floor"]["slo_attainment_pp"] for p in floored]),
                              "twin_mape_pct_same_points": _mean([p["all"]["mape_pct"] for p in floored])}
    return out


def echo_table(result: dict[str, Any]) -> None:
    s = result["summary"]
    click.echo(f"{'policy':<10} {'rps':>5} {'MAPE %':>7} {'TTFT p50':>9} {'TTFT p90':>9} {'TBT p50':>8} {'TBT p90':>8} "
               f"{'dSLO pp':>8} {'SLO real':>9} {'SLO twin':>9}")
    for p in s["points"]:
        e = p["all"]
        click.echo(f"{p['policy']:<10} {p['rps']:>5g} {e['mape_pct']:>7.1f} {e['ttft_p50_pct']:>9.1f} "
                   f"{e['ttft_p90_pct']:>9.1f} {e['tbt_p50_pct']:>8.1f} {e['tbt_p90_pct']:>8.1f} "
                   f"{e['slo_attainment_pp']:>8.1f} {100 * p['real']['slo_attainment']:>9.1f} "
                   f"{100 * p['twin']['slo_attainment']:>9.1f}")
    for p in s["points"]:
        if "noise_floor" in p:
            f = p["noise_floor"]
            click.echo(f"noise floor {p['policy']:<10} {p['rps']:>5g}: the engine against itself MAPE "
                       f"{f['mape_pct']:.1f} % (TTFT p50 {f['ttft_p50_pct']:.1f}, p90 {f['ttft_p90_pct']:.1f}, "
                       f"TBT p50 {f['tbt_p50_pct']:.1f}, p90 {f['tbt_p90_pct']:.1f}), SLO "
                       f"{f['slo_attainment_pp']:.1f} pp over {f['pairs']} pair(s)")
    for w in s["winners"]:
        click.echo(f"rps {w['rps']:g}: winner real {w['real']}, twin {w['twin']} ({'agree' if w['agree'] else 'DISAGREE'})")
    click.echo("mean MAPE % by twin variant: " + ", ".join(f"{k} {v:.1f}" for k, v in s["mape_pct"].items()))


def plot_cdfs(cdfs: dict[tuple[str, float], Any], out_dir: Path) -> list[Path]:
    """One PNG per (policy, rps): TTFT and inter-token-gap CDFs, real engine vs twin, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for (policy, rps), (real, twin) in sorted(cdfs.items()):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, key, label in ((axes[0], "ttft", "TTFT (ms)"), (axes[1], "gaps", "inter-token gap (ms)")):
            for name, side, style in (("real engine", real, "-"), ("twin", twin, "--")):
                v = side[key]
                if v.size:
                    ax.plot(1e3 * v, np.arange(1, v.size + 1) / v.size, style, label=name)
            ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("CDF")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"{policy}, {rps:g} req/s (seed 0)")
        fig.tight_layout()
        path = out_dir / f"fidelity_cdf_{policy}_r{rps:g}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
