"""Summaries, the text table and the CDF plots of ``superinferd bench fidelity``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.bench.fidelity.twin import errors, percentiles, request_values

ERROR_KEYS = ("ttft_p50_pct", "ttft_p90_pct", "tbt_p50_pct", "tbt_p90_pct", "mape_pct", "ttft_attainment_pp",
              "tbt_attainment_pp", "slo_attainment_pp")


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _mean_abs(errs: list[dict[str, float]]) -> dict[str, float]:
    """Each error measure's mean absolute value over several runs' errors (:data:`ERROR_KEYS`)."""
    return {k: _mean([abs(e[k]) for e in errs]) for k in ERROR_KEYS}


ATTAINMENTS = ("ttft_attainment", "tbt_attainment", "tbt_gap_attainment", "slo_attainment")


def real_values(fields: dict[str, np.ndarray], prefix: str = "") -> dict[str, np.ndarray]:
    """A real run's per-request TTFT and TBT from what ``.cdf.npz`` keeps of it (``prefix``: ``rep1.`` for its
    first repeat); a request without a first token counts until the run's last event."""
    f = {k: np.asarray(fields[prefix + k], float) for k in ("t_arr", "t_first", "t_end", "outputs", "last_token")}
    end = float(np.nanmax(np.concatenate([f["t_arr"], f["t_end"], f["last_token"]])))
    return request_values(f["t_arr"], f["t_first"], f["outputs"], f["last_token"], end)


def pooled_side(values: list[dict[str, np.ndarray]], sides: list[dict[str, Any]]) -> dict[str, float]:
    """Several seeds' runs as one: percentiles over all their requests, attainments weighted by requests."""
    out = percentiles({k: np.concatenate([v[k] for v in values]) for k in ("ttft", "tbt")})
    n = np.array([max(s["arrived"], 1) for s in sides], float)
    out.update({k: float(np.dot(n, [s[k] for s in sides]) / n.sum()) for k in ATTAINMENTS})
    return out


def _pooled(rs: list[dict[str, Any]], requests: dict[tuple, dict[str, np.ndarray]],
            twin_values: dict[tuple, dict[str, np.ndarray]]) -> dict[str, Any]:
    """The twin's error, and the engine's against its repeats, with the seeds of a point pooled (the quantile
    of 225 requests, not the mean of three quantiles of 75); empty where a run's per-request data is missing."""
    keys = [(r["policy"], r["rps"], r["seed"]) for r in rs]
    if not all(k in requests and k in twin_values for k in keys):
        return {}
    real = pooled_side([real_values(requests[k]) for k in keys], [r["real"] for r in rs])
    twin = pooled_side([twin_values[k] for k in keys], [r["twin"] for r in rs])
    out: dict[str, Any] = {"pooled": errors(real, twin)}
    floor = []
    for rep in range(1, 1 + min(len(r.get("real_repeats", [])) for r in rs)):
        if all(f"rep{rep}.t_first" in requests[k] for k in keys):
            again = pooled_side([real_values(requests[k], f"rep{rep}.") for k in keys],
                                [r["real_repeats"][rep - 1] for r in rs])
            floor.append(errors(real, again))
    if floor:
        out["noise_floor_pooled"] = _mean_abs(floor)
    return out


def summarise_fidelity(runs: list[dict[str, Any]], variants: list[str],
                       requests: dict[tuple, dict[str, np.ndarray]] | None = None,
                       twin_values: dict[tuple, dict[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """Per (policy, rps): mean errors over seeds (attainment errors as mean absolute points); per variant the
    same for the ablation; per rate whether the twin picks the engine's winner on ``slo_attainment``. With
    every run's per-request values (``requests``: the real runs' fields by (policy, rps, seed); ``twin_values``:
    the full twin's), also the errors with each point's seeds pooled (``pooled``, ``noise_floor_pooled``)."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["policy"], r["rps"]), []).append(r)
    points = []
    for (policy, rps), rs in groups.items():
        row: dict[str, Any] = {"policy": policy, "rps": rps, "seeds": len(rs)}
        for name in variants:
            errs = [r["error"] if name == "all" else r["ablation"][name]["error"] for r in rs]
            row[name] = _mean_abs(errs)
        for side in ("real", "twin"):
            row[side] = {k: _mean([r[side][k] for r in rs]) for k in ("slo_attainment", "ttft_attainment",
                                                                      "tbt_attainment", "ttft_p90_s", "tbt_p90_s")}
        floor = [errors(r["real"], again) for r in rs for again in r.get("real_repeats", [])]
        if floor:  # the engine's first run against its repeats, the same measures as the twin's error
            row["noise_floor"] = {**_mean_abs(floor), "pairs": len(floor)}
        row.update(_pooled(rs, requests or {}, twin_values or {}))
        if any("run_speed" in r for r in rs):  # the host's speed in each run and its repeats (fidelity.steps)
            row["run_speed"] = {"runs": [r.get("run_speed") for r in rs],
                                "repeats": [v for r in rs for v in r.get("repeat_run_speed", [])]}
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
    if all("pooled" in p for p in points):
        out["pooled"] = {k: _mean([abs(p["pooled"][k]) for p in points]) for k in ("mape_pct", "slo_attainment_pp")}
    floored = [p for p in points if "noise_floor" in p]
    if floored:
        out["noise_floor"] = {"mape_pct": _mean([p["noise_floor"]["mape_pct"] for p in floored]),
                              "slo_attainment_pp": _mean([p["noise_floor"]["slo_attainment_pp"] for p in floored]),
                              "twin_mape_pct_same_points": _mean([p["all"]["mape_pct"] for p in floored])}
        if all("noise_floor_pooled" in p for p in floored):
            out["noise_floor"].update({f"pooled_{k}": _mean([p["noise_floor_pooled"][k] for p in floored])
                                       for k in ("mape_pct", "slo_attainment_pp")})
    return out


def echo_table(result: dict[str, Any]) -> None:
    s = result["summary"]
    click.echo(f"{'policy':<10} {'rps':>5} {'MAPE %':>7} {'TTFT p50':>9} {'TTFT p90':>9} {'TBT p50':>8} {'TBT p90':>8} "
               f"{'dSLO pp':>8} {'SLO real':>9} {'SLO twin':>9} {'pooled MAPE %':>14} {'pooled dSLO':>12}")
    for p in s["points"]:
        e, pooled = p["all"], p.get("pooled", {})
        click.echo(f"{p['policy']:<10} {p['rps']:>5g} {e['mape_pct']:>7.1f} {e['ttft_p50_pct']:>9.1f} "
                   f"{e['ttft_p90_pct']:>9.1f} {e['tbt_p50_pct']:>8.1f} {e['tbt_p90_pct']:>8.1f} "
                   f"{e['slo_attainment_pp']:>8.1f} {100 * p['real']['slo_attainment']:>9.1f} "
                   f"{100 * p['twin']['slo_attainment']:>9.1f} {pooled.get('mape_pct', math.nan):>14.1f} "
                   f"{abs(pooled.get('slo_attainment_pp', math.nan)):>12.1f}")
    for p in s["points"]:
        if "noise_floor" in p:
            f, fp = p["noise_floor"], p.get("noise_floor_pooled", {})
            click.echo(f"noise floor {p['policy']:<10} {p['rps']:>5g}: the engine against itself MAPE "
                       f"{f['mape_pct']:.1f} % (TTFT p50 {f['ttft_p50_pct']:.1f}, p90 {f['ttft_p90_pct']:.1f}, "
                       f"TBT p50 {f['tbt_p50_pct']:.1f}, p90 {f['tbt_p90_pct']:.1f}), SLO "
                       f"{f['slo_attainment_pp']:.1f} pp over {f['pairs']} pair(s); seeds pooled "
                       f"{fp.get('mape_pct', math.nan):.1f} %, {fp.get('slo_attainment_pp', math.nan):.1f} pp")
    for p in s["points"]:
        if "run_speed" in p:
            speeds = ", ".join("-" if v is None else f"{v:.3f}" for v in p["run_speed"]["runs"] + p["run_speed"]["repeats"])
            click.echo(f"run speed {p['policy']:<10} {p['rps']:>5g}: {speeds} (runs, then repeats; x the twin's step)")
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
