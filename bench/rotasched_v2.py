"""RotaSched v2 on the twin (issue 10): the policy grid, the ablation, and the targets checked.

    .venv/bin/python bench/rotasched_v2.py --out bench/results --duration 120 --seeds 3 [--only grid|ablation]

Writes ``v2_grid_<set>.json``/``.png`` (every policy against RPS: SLO, TTFT, per-request TBT and pooled
gap attainment, throughput, bootstrap 95 % bands over seeds), ``v2_ablation.json``/``.png`` (``lvf`` with
each mechanism off in turn), and ``v2_targets.json``: for every point, ``lvf`` against the targets of
issue 10, with the knee of each workload (the first RPS where the best stock baseline meets both SLOs
for fewer than 90 % of requests). Nothing is tuned here: every run uses the defaults of ``Params``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from superinfer.bench.twin.grid import grid, run_grid
from superinfer.bench.twin.plots import metric_vs_x
from superinfer.core import Params
from superinfer.sim.metrics import summarise
from superinfer.sim.run import RunSpec

AZURE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "traces", "azure_conv_2023.csv")
POLICIES = ["vllm", "vllm-offload", "sjf", "lvf-paper", "lvf"]
SETS = {  # name: (model, workload, arrival, rps list)
    "azure_qwen": ("qwen2.5-32b", AZURE, "poisson", [4, 5, 6, 7, 8, 10]),
    "sharegpt_qwen": ("qwen2.5-32b", "sharegpt", "poisson", [20, 25, 30, 35]),
    "sharegpt_llama": ("llama-3-8b", "sharegpt", "poisson", [60, 80, 100]),
    "lmsys_mixtral": ("mixtral-8x7b", "lmsys", "poisson", [40, 60, 80]),
    "bursty_qwen": ("qwen2.5-32b", "sharegpt", "gamma:0.5", [20, 25, 30]),
}
KEYS = ("slo_attainment", "ttft_attainment", "tbt_attainment", "tbt_gap_attainment", "throughput_tok_s")
ABLATION = {  # variant: changes to the defaults (one mechanism off each)
    "lvf (all on)": {},
    "no SLO token budget": {"step_slo_share": 0.0},
    "no slack gate": {"slack_gate_s": -3600.0},
    "no rotation margin": {"rotation_margin_s": 0.0},
    "no hopeless-last": {"hopeless_last": 0},
    "no backfill": {"backfill": 0},
    "all off (= lvf-paper's decisions)": {"step_slo_share": 0.0, "slack_gate_s": -3600.0, "rotation_margin_s": 0.0,
                                          "hopeless_last": 0, "backfill": 0},
}
ABLATION_POINTS = [("azure_qwen", 7), ("sharegpt_qwen", 30), ("sharegpt_llama", 80), ("lmsys_mixtral", 60)]
# With the paper's engine, the points where lvf-paper thrashes (bench/results/v2_targets_paper_engine.json).
ABLATION_POINTS_PAPER = [("azure_qwen", 7), ("sharegpt_qwen", 30), ("sharegpt_llama", 100), ("lmsys_mixtral", 80)]


def _save(out: str, name: str, payload: dict) -> None:
    with open(os.path.join(out, f"{name}.json"), "w") as fh:
        json.dump(payload, fh, indent=1)
        fh.write("\n")


def _mean(summary: list[dict], policy: str, rps: float, key: str) -> float:
    for r in summary:
        if r["policy"] == policy and r["rps"] == rps:
            return r[key]["mean"]
    raise KeyError((policy, rps, key))


def targets(name: str, summary: list[dict], rps_list: list[float]) -> dict:
    """Issue 10's targets for ``lvf`` at every point of one set, and at its knee."""
    points, knee = [], None
    for rps in rps_list:
        m = {p: {k: _mean(summary, p, rps, k) for k in KEYS + ("rotations",)} for p in POLICIES}
        best = max(m["vllm"]["slo_attainment"], m["vllm-offload"]["slo_attainment"])
        lvf, paper = m["lvf"], m["lvf-paper"]
        thrash = paper["rotations"] > 1000
        row = {"rps": rps, "metrics": m,
               "slo_vs_best_stock_pp": 100 * (lvf["slo_attainment"] - best),
               "slo_ok": lvf["slo_attainment"] >= best - 0.01,
               "throughput_vs_vllm": lvf["throughput_tok_s"] / m["vllm"]["throughput_tok_s"],
               "throughput_ok": lvf["throughput_tok_s"] >= 0.98 * m["vllm"]["throughput_tok_s"],
               "rotations_vs_paper": (lvf["rotations"] / paper["rotations"]) if thrash else None,
               "rotations_ok": (lvf["rotations"] <= 0.1 * paper["rotations"]) if thrash else True}
        points.append(row)
        if knee is None and best < 0.9:
            knee = rps
            row["knee"] = {"slo_gain_pp": row["slo_vs_best_stock_pp"],
                           "ttft_gain_pp": 100 * (lvf["ttft_attainment"] - m["vllm"]["ttft_attainment"]),
                           "tbt_gain_pp": 100 * (lvf["tbt_attainment"] - m["vllm"]["tbt_attainment"])}
            k = row["knee"]
            k["ok"] = k["slo_gain_pp"] >= 20 and k["ttft_gain_pp"] >= 20 and k["tbt_gain_pp"] >= -2
    return {"set": name, "knee_rps": knee, "points": points}


PAPER_ENGINE = dict(max_num_seqs=16384, max_num_batched_tokens=16384, dram_gib=400.0)  # design §6


def run_sets(out: str, duration: float, seeds: int, workers: int | None, cmd: str, paper: bool = False,
             sets: list[str] | None = None, rerun: str | None = None) -> list[dict]:
    """The grid of every set; with ``rerun``, only that policy's runs are made again and the others are read
    back from the set's JSON (every run is deterministic for its seed, so this equals a full run when only
    that policy changed)."""
    checks = []
    for name, (model, workload, arrival, rps) in SETS.items():
        if sets and name not in sets:
            continue
        base = RunSpec(policy="vllm", rps=1.0, seed=0, workload=workload, arrival=arrival, model=model,
                       duration_s=duration, **(PAPER_ENGINE if paper else {}))
        name = f"{name}_paper_engine" if paper else name
        if rerun:
            with open(os.path.join(out, f"v2_grid_{name}.json")) as fh:
                kept = [r for r in json.load(fh)["runs"] if r["policy"] != rerun]
            runs = kept + run_grid(grid(base, [rerun], rps, seeds), workers)
            runs.sort(key=lambda r: (POLICIES.index(r["policy"]), r["rps"], r["seed"]))
        else:
            runs = run_grid(grid(base, POLICIES, rps, seeds), workers)
        summary = summarise(runs)
        png = os.path.join(out, f"v2_grid_{name}.png")
        engine = "paper engine 16384/16384, 400 GiB DRAM" if paper else "max_num_seqs 256, 8192 tokens"
        metric_vs_x(summary, png, f"{model}, {os.path.basename(workload)} ({arrival}), {engine}, {seeds} seeds, "
                    f"{duration:g} s",
                    KEYS, "rps", "requests per second")
        _save(out, f"v2_grid_{name}", {"command": cmd, "params": asdict(Params()), "runs": runs,
                                       "summary": summary, "plot": png})
        checks.append(targets(name, summary, rps))
        print(f"{name}: done", flush=True)
    return checks


def run_ablation(out: str, duration: float, seeds: int, workers: int | None, cmd: str, paper: bool = False) -> None:
    specs = []
    points = ABLATION_POINTS_PAPER if paper else ABLATION_POINTS
    for variant, changes in ABLATION.items():
        for set_name, rps in points:
            model, workload, arrival, _ = SETS[set_name]
            for seed in range(seeds):
                specs.append(RunSpec(policy="lvf", rps=rps, seed=seed, workload=workload, arrival=arrival,
                                     model=model, duration_s=duration, params=Params().replace(**changes),
                                     variant=variant, **(PAPER_ENGINE if paper else {})))
    runs = run_grid(specs, workers)
    for r, s in zip(runs, specs):
        r["point"] = f"{s.model} {os.path.basename(s.workload)} {s.rps:g}"
    table = {}
    for r in runs:
        t = table.setdefault(r["variant"], {}).setdefault(r["point"], {k: [] for k in KEYS + ("rotations",)})
        for k in KEYS + ("rotations",):
            t[k].append(r[k])
    means = {v: {p: {k: sum(x) / len(x) for k, x in d.items()} for p, d in pts.items()} for v, pts in table.items()}
    name = "v2_ablation_paper_engine" if paper else "v2_ablation"
    _save(out, name, {"command": cmd, "variants": ABLATION, "points": points, "means": means, "runs": runs})
    _ablation_plot(means, os.path.join(out, f"{name}.png"))


def _ablation_plot(means: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    variants = list(means)
    points = list(next(iter(means.values())))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key in zip(axes, ("slo_attainment", "throughput_tok_s", "rotations")):
        width = 0.8 / len(variants)
        for i, v in enumerate(variants):
            vals = [means[v][p][key] * (100 if "attainment" in key else 1) for p in points]
            ax.bar(np.arange(len(points)) + i * width, vals, width, label=v)
        ax.set_xticks(np.arange(len(points)) + 0.4 - width / 2, [p.replace(" ", "\n", 1) for p in points], fontsize=7)
        ax.set_title(key)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.suptitle("RotaSched v2 ablation: lvf with each mechanism off (twin, means over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--only", choices=("grid", "ablation"), default=None)
    ap.add_argument("--paper-engine", action="store_true", help="the paper's engine settings (design §6)")
    ap.add_argument("--sets", default="", help="comma-separated sets (default: all)")
    ap.add_argument("--rerun", default=None, choices=POLICIES,
                    help="run only this policy again; the others' runs are read from the existing grid JSON")
    a = ap.parse_args()
    cmd = "python bench/rotasched_v2.py " + " ".join(sys.argv[1:])
    if a.only != "ablation":
        checks = run_sets(a.out, a.duration, a.seeds, a.workers, cmd, a.paper_engine,
                          [x for x in a.sets.split(",") if x], a.rerun)
        _save(a.out, "v2_targets_paper_engine" if a.paper_engine else "v2_targets", {"command": cmd, "checks": checks})
        for c in checks:
            for p in c["points"]:
                m = p["metrics"]
                print(f"{c['set']:<15} {p['rps']:>5g}  slo lvf {100 * m['lvf']['slo_attainment']:5.1f}  "
                      f"vllm {100 * m['vllm']['slo_attainment']:5.1f}  offload {100 * m['vllm-offload']['slo_attainment']:5.1f}"
                      f"  paper {100 * m['lvf-paper']['slo_attainment']:5.1f}  thr x{p['throughput_vs_vllm']:.2f}"
                      f"  rot {m['lvf']['rotations']:.0f}/{m['lvf-paper']['rotations']:.0f}"
                      f"{'  KNEE ' + json.dumps(p['knee']) if 'knee' in p else ''}")
    if a.only != "grid":
        run_ablation(a.out, a.duration, a.seeds, a.workers, cmd, a.paper_engine)


if __name__ == "__main__":
    main()
