"""The text tables ``bench vllm`` prints: per policy and load, attainments with 95 % intervals, tails and
counters; the measured capacity; the paired differences between policies."""

from __future__ import annotations

from typing import Any

import click
import numpy as np


def _load(row: dict[str, Any]) -> str:
    """A summary row's or paired entry's load: ``x0.8 (3.21/s)`` for a capacity share, else ``3.21/s``."""
    rate = f"{row['rps']:.2f}/s"
    return f"x{row['share']:g} ({rate})" if row.get("share") is not None else rate


def echo_summary(result: dict[str, Any], runs: list[dict[str, Any]], slo: tuple[float, float]) -> None:
    """Print ``result["summary"]`` (from :func:`superinfer.sim.metrics.summarise`) as a table, then the
    capacity and the paired differences when the result has them."""
    click.echo(f"SLOs: TTFT {slo[0]:.3f} s, TBT {slo[1]:.4f} s")
    click.echo(f"{'policy':<14} {'load':>15} {'SLO att %':>20} {'TTFT att %':>20} {'TBT att %':>20} {'gap att %':>9} {'TTFT p90 s':>10} {'shed %':>6} {'preempt':>8} {'rot':>6} {'swap-in':>7} {'recomp tok':>10} {'other cpu':>9}")
    for r in result["summary"]:
        def ci(k: str) -> str:
            m, (lo, hi) = r[k]["mean"], r[k]["ci95"]
            return f"{100 * m:5.1f} [{100 * lo:5.1f},{100 * hi:5.1f}]"
        mine = [x for x in runs if x["policy"] == r["policy"] and x.get("rps") == r["rps"]
                and x.get("share") == r.get("share")]
        p90 = np.mean([x["ttft_p90_s"] for x in mine])

        def mean(k: str, mine: list[dict[str, Any]] = mine) -> float:
            if k == "other":
                vals = [x["host"]["other_cpu_share"] for x in mine if x["host"]["other_cpu_share"] is not None]
                return float(np.mean(vals)) if vals else float("nan")
            return float(np.mean([x[k] for x in mine]))
        gap = 100 * r["tbt_gap_attainment"]["mean"] if "tbt_gap_attainment" in r else float("nan")
        click.echo(f"{r['policy']:<14} {_load(r):>15} {ci('slo_attainment'):>20} {ci('ttft_attainment'):>20} "
                   f"{ci('tbt_attainment'):>20} {gap:>9.1f} {p90:>10.3f} {100 * mean('shed_share'):>6.1f} "
                   f"{r['preemptions']['mean']:>8.0f} {r['rotations']['mean']:>6.0f} "
                   f"{mean('swap_ins'):>7.0f} {mean('recomputed_tokens'):>10.0f} {mean('other'):>9.2f}")
    echo_capacity(result)
    echo_paired(result.get("paired", []))


def echo_capacity(result: dict[str, Any]) -> None:
    """The capacity measured at the start and, if measured, at the end (with the drift between them)."""
    cap, end = result.get("capacity"), result.get("capacity_end")
    if not cap:
        return
    line = f"capacity: {cap['rps']:.3f} req/s ({cap['requests']} requests at t=0, makespan {cap['makespan_s']:.2f} s)"
    if end and end.get("rps") is not None:
        line += f"; at the end {end['rps']:.3f} req/s (x{end['drift']:.2f})"
    elif end:
        line += f"; at the end not measured ({end.get('error') or str(end.get('unfinished')) + ' unfinished'})"
    click.echo(line)


def _pp(d: dict[str, Any]) -> str:
    """``+1.2 [-0.5,+2.9]``: a paired difference in pp with its interval (``n/a`` with one seed)."""
    ci = d["ci95_pp"]
    inner = f"{ci[0]:+5.1f},{ci[1]:+5.1f}" if ci is not None else "n/a"
    return f"{d['mean_pp']:+5.1f} [{inner}]"


def echo_paired(paired: list[dict[str, Any]]) -> None:
    """Print the paired differences a - b (:func:`superinfer.bench.engine.paired.paired_results`)."""
    if not paired:
        return
    click.echo("paired, a - b over the same seeds (pp; 95 % t interval), throughput a / b:")
    click.echo(f"{'a - b':<20} {'load':>15} {'n':>3} {'SLO att pp':>21} {'TTFT att pp':>21} {'TBT att pp':>21} "
               f"{'throughput a/b':>22}")
    for e in paired:
        t = e["throughput_ratio"]
        ci = f"{t['ci95'][0]:.3f},{t['ci95'][1]:.3f}" if t["ci95"] is not None else "n/a"
        tp = f"{t['mean']:.3f} [{ci}]"
        click.echo(f"{e['a'] + ' - ' + e['b']:<20} {_load(e):>15} {e['n']:>3} {_pp(e['slo_attainment']):>21} "
                   f"{_pp(e['ttft_attainment']):>21} {_pp(e['tbt_attainment']):>21} {tp:>22}")
