"""The text table ``bench vllm`` prints: per policy, attainments with 95 % intervals, tails and counters."""

from __future__ import annotations

from typing import Any

import click
import numpy as np


def echo_summary(result: dict[str, Any], runs: list[dict[str, Any]], slo: tuple[float, float]) -> None:
    """Print ``result["summary"]`` (from :func:`superinfer.sim.metrics.summarise`) as a table."""
    click.echo(f"SLOs: TTFT {slo[0]:.3f} s, TBT {slo[1]:.4f} s")
    click.echo(f"{'policy':<14} {'SLO att %':>20} {'TTFT att %':>20} {'TBT att %':>20} {'gap att %':>9} {'TTFT p90 s':>10} {'preempt':>8} {'rot':>6} {'swap-in':>7} {'recomp tok':>10} {'other cpu':>9}")
    for r in result["summary"]:
        def ci(k: str) -> str:
            m, (lo, hi) = r[k]["mean"], r[k]["ci95"]
            return f"{100 * m:5.1f} [{100 * lo:5.1f},{100 * hi:5.1f}]"
        mine = [x for x in runs if x["policy"] == r["policy"]]
        p90 = np.mean([x["ttft_p90_s"] for x in mine])

        def mean(k: str, mine: list[dict[str, Any]] = mine) -> float:
            if k == "other":
                vals = [x["host"]["other_cpu_share"] for x in mine if x["host"]["other_cpu_share"] is not None]
                return float(np.mean(vals)) if vals else float("nan")
            return float(np.mean([x[k] for x in mine]))
        gap = 100 * r["tbt_gap_attainment"]["mean"] if "tbt_gap_attainment" in r else float("nan")
        click.echo(f"{r['policy']:<14} {ci('slo_attainment'):>20} {ci('ttft_attainment'):>20} "
                   f"{ci('tbt_attainment'):>20} {gap:>9.1f} {p90:>10.3f} "
                   f"{r['preemptions']['mean']:>8.0f} {r['rotations']['mean']:>6.0f} "
                   f"{mean('swap_ins'):>7.0f} {mean('recomputed_tokens'):>10.0f} {mean('other'):>9.2f}")
