"""`superinferd bench figures`: regenerate every reproduction figure and its JSON into one folder.

Figures (the paper's shapes, bootstrap 95 % bands over seeds):

* ``fig16_<model>_<workload>``: TTFT and TBT attainment vs RPS, every policy (paper Figure 16), at the
  paper's RPS lists extended upwards until the twin shows memory pressure (see docs/reproduction.md).
* ``fig17_ablation``: vllm / lvf-paper with a low budget / lvf-nooverlap with a high budget / lvf-paper.
* ``fig18_alpha``, ``fig19_delta_f``, ``fig20_delta_b``: parameter sweeps of ``lvf-paper`` at one loaded point.
* ``fig21_b_xfer``: transfer-budget sweep at the same point.

Every figure's numbers are written next to it as JSON with the command that made them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import click

from superinfer.core import Params
from superinfer.bench.twin.grid import grid, run_grid
from superinfer.bench.twin.plots import attainment_vs_x, metric_vs_x
from superinfer.sim.metrics import summarise
from superinfer.sim.run import RunSpec

ALL_POLICIES = ["vllm", "vllm-offload", "priority", "sarathi", "sjf", "lvf-paper", "lvf", "lvf-nooverlap"]
# The paper's own figures (ablation, parameter sweeps) reproduce the paper's algorithm.
PAPER_LVF = "lvf-paper"
FIG16_KEYS = ("slo_attainment", "ttft_attainment", "tbt_attainment", "tbt_gap_attainment")

# (model, workload, RPS): the paper's lists (design §6), extended where the twin needs more load to fill HBM.
MAIN = [
    ("llama-3-8b", "sharegpt", [35, 45, 60, 80, 100]),
    ("llama-3-8b", "lmsys", [50, 75, 100, 130, 160]),
    ("qwen2.5-32b", "sharegpt", [5, 10, 15, 20, 25, 30, 35]),
    ("qwen2.5-32b", "lmsys", [10, 20, 30, 40, 50]),
    ("mixtral-8x7b", "sharegpt", [10, 20, 30, 40, 50]),
    ("mixtral-8x7b", "lmsys", [10, 20, 40, 60, 80]),
]
# The loaded point for the ablation and sweeps: Qwen2.5-32B, ShareGPT, where vLLM's attainment drops.
SWEEP_MODEL, SWEEP_WORKLOAD, SWEEP_RPS = "qwen2.5-32b", "sharegpt", 30.0
ABLATION_RPS = [20, 25, 30, 35]


def _paper_base(duration: float) -> RunSpec:
    # The paper's engine settings: max_num_seqs = max_num_batched_tokens = 16384, 400 GiB DRAM pool, GH200.
    return RunSpec(policy="vllm", rps=1.0, seed=0, duration_s=duration, hardware="gh200", max_num_seqs=16384,
                   max_num_batched_tokens=16384, dram_gib=400.0)


def _save(out: str, name: str, payload: dict) -> str:
    path = os.path.join(out, f"{name}.json")
    with open(path, "w") as fh:
        json.dump(payload, fh, indent=1)
        fh.write("\n")
    return path


def _replot(out: str) -> None:
    """Redraw every figure from its JSON (after a plotting change, without rerunning the simulations)."""
    import glob

    for path in sorted(glob.glob(os.path.join(out, "fig*.json"))):
        with open(path) as fh:
            data = json.load(fh)
        name = os.path.basename(path)[:-5]
        png = os.path.join(out, f"{name}.png")
        if name.startswith("fig16_") and all("slo_attainment" in r for r in data["summary"]):
            seeds = max(r["seed"] for r in data["runs"]) + 1
            metric_vs_x(data["summary"], png, f"{data['model']} on gh200, {data['workload']} lengths, Poisson, "
                        f"{data.get('duration_s', 120.0):g} s, {seeds} seeds", FIG16_KEYS, "rps", "requests per second")
        elif name.startswith("fig16_"):  # made before slo_attainment existed
            seeds = max(r["seed"] for r in data["runs"]) + 1
            attainment_vs_x(data["summary"], png, f"{data['model']} on gh200, {data['workload']} lengths, Poisson, "
                            f"{data.get('duration_s', 120.0):g} s, {seeds} seeds")
        elif name == "fig17_ablation":
            attainment_vs_x(data["summary"], png, f"Ablation: {SWEEP_MODEL}, {SWEEP_WORKLOAD}, gh200", group="variant")
        else:
            field = {"fig18_alpha": "alpha", "fig19_delta_f": "delta_f", "fig20_delta_b": "delta_b",
                     "fig21_b_xfer": "b_xfer"}[name]
            metric_vs_x(data["summary"], png, f"lvf, {SWEEP_MODEL}, {SWEEP_WORKLOAD}, {SWEEP_RPS:g} RPS, gh200: "
                        f"{field} sweep", ("ttft_attainment", "tbt_attainment", "ttft_p99_s", "tbt_gap_p99_s"),
                        x=field, xlabel=field)
        click.echo(png)


def _sweep(base: RunSpec, seeds: int, values: list, field: str, label: str,
           workers: int | None) -> tuple[list[dict], list[dict]]:
    specs = []
    for v in values:
        for s in range(seeds):
            if field == "b_xfer":
                specs.append(replace(base, seed=s, b_xfer=int(v), variant=f"{label}={v}"))
            else:
                specs.append(replace(base, seed=s, params=base.params.replace(**{field: v}), variant=f"{label}={v}"))
    runs = run_grid(specs, workers)
    for r, v in zip(runs, [v for v in values for _ in range(seeds)]):
        r[field] = v
    summary = summarise(runs)
    for row in summary:
        row[field] = float(row["variant"].split("=")[1])
    return runs, summary


@click.command("figures")
@click.option("--out", default="bench/results", show_default=True, type=click.Path(file_okay=False))
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option("--duration", default=120.0, show_default=True, type=click.FloatRange(min=1))
@click.option("--only", default="all", show_default=True,
              help="all | main | ablation | sweeps | report (table from existing JSON) | replot (PNGs from existing JSON)")
@click.option("--workers", default=None, type=click.IntRange(min=1))
def figures(out: str, seeds: int, duration: float, only: str, workers: int | None) -> None:
    """Regenerate the reproduction figures (PNG) and their JSON into OUT."""
    if only not in ("all", "main", "ablation", "sweeps", "report", "replot"):
        raise click.BadParameter(f"expected all|main|ablation|sweeps|report|replot, got {only!r}", param_hint="--only")
    os.makedirs(out, exist_ok=True)
    if only == "report":
        from superinfer.bench.twin.report import markdown, reproduction_rows

        rows = reproduction_rows(out)
        _save(out, "reproduction_summary", {"command": "superinferd bench figures " + " ".join(sys.argv[3:]),
                                            "rows": rows})
        click.echo(markdown(rows))
        return
    if only == "replot":
        _replot(out)
        return
    command = "superinferd bench figures " + " ".join(sys.argv[3:])
    base = _paper_base(duration)
    t0 = time.time()
    if only in ("all", "main"):
        for model, workload, rps in MAIN:
            b = replace(base, model=model, workload=workload)
            runs = run_grid(grid(b, ALL_POLICIES, [float(r) for r in rps], seeds), workers)
            summary = summarise(runs)
            name = f"fig16_{model}_{workload}"
            png = metric_vs_x(summary, os.path.join(out, f"{name}.png"),
                              f"{model} on gh200, {workload} lengths, Poisson, {duration:g} s, {seeds} seeds",
                              FIG16_KEYS, "rps", "requests per second")
            _save(out, name, {"command": command, "model": model, "workload": workload, "duration_s": duration,
                              "seeds": seeds, "runs": runs, "summary": summary, "plot": png})
            click.echo(f"{name}: {len(runs)} runs, {time.time() - t0:.0f} s")
    sweep_base = replace(base, model=SWEEP_MODEL, workload=SWEEP_WORKLOAD, rps=SWEEP_RPS)
    if only in ("all", "ablation"):
        from superinfer.sim.run import cost_model
        from superinfer.sim.engine import reference_iteration_s

        default_b = cost_model(replace(sweep_base, policy=PAPER_LVF)).default_b_xfer(
            reference_iteration_s(cost_model(sweep_base), sweep_base.max_num_seqs))
        # lvf-nooverlap is v2 on a serial link; the paper's "no overlap" bar is approximated by it.
        variants = [("vllm", "vllm", None),
                    (f"lvf-paper, B_xfer={max(default_b // 16, 1)}", PAPER_LVF, max(default_b // 16, 1)),
                    (f"lvf-nooverlap (v2), B_xfer={default_b * 4}", "lvf-nooverlap", default_b * 4),
                    (f"lvf-paper, B_xfer={default_b}", PAPER_LVF, default_b)]
        specs = [replace(sweep_base, policy=p, rps=float(r), seed=s, b_xfer=b, variant=label)
                 for label, p, b in variants for r in ABLATION_RPS for s in range(seeds)]
        runs = run_grid(specs, workers)
        summary = summarise(runs)
        png = attainment_vs_x(summary, os.path.join(out, "fig17_ablation.png"),
                              f"Ablation: {SWEEP_MODEL}, {SWEEP_WORKLOAD}, gh200", group="variant")
        _save(out, "fig17_ablation", {"command": command, "runs": runs, "summary": summary, "plot": png})
        click.echo(f"fig17_ablation: {len(runs)} runs, {time.time() - t0:.0f} s")
    if only in ("all", "sweeps"):
        lvf = replace(sweep_base, policy=PAPER_LVF)
        keys = ("ttft_attainment", "tbt_attainment", "ttft_p99_s", "tbt_gap_p99_s")
        for name, field, label, values in (
            ("fig18_alpha", "alpha", "alpha", [0.0, 1.0, 3.0, 10.0, 30.0]),
            ("fig19_delta_f", "delta_f", "delta_f", [-1.0, 0.0, 0.5, 1.0, 2.0, 4.0]),
            ("fig20_delta_b", "delta_b", "delta_b", [-0.2, -0.1, 0.0, 0.1, 0.3, 1.0]),
            ("fig21_b_xfer", "b_xfer", "b_xfer", [25, 100, 400, 1600, 3200, 6400]),
        ):
            runs, summary = _sweep(lvf, seeds, values, field, label, workers)
            png = metric_vs_x(summary, os.path.join(out, f"{name}.png"),
                              f"{PAPER_LVF}, {SWEEP_MODEL}, {SWEEP_WORKLOAD}, {SWEEP_RPS:g} RPS, gh200: {label} sweep",
                              keys, x=field, xlabel=label, group="policy")
            _save(out, name, {"command": command, "runs": runs, "summary": summary, "plot": png,
                              "params": vars(Params())})
            click.echo(f"{name}: {len(runs)} runs, {time.time() - t0:.0f} s")
