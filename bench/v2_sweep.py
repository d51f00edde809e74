"""Sweep RotaSched v2's knobs on the twin to choose its defaults by measurement (issue 10).

    .venv/bin/python bench/v2_sweep.py --out bench/results/v2_sweep.json [--duration 60 --seeds 1]

Each knob is varied alone around a base setting, at loaded points of three workloads; the score is the
mean ``slo_attainment`` over the points (throughput and rotations are kept beside it). Nothing here is
tuned to a target: the default of each knob is the best value of its sweep, and the JSON keeps all.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from superinfer.bench.twin.grid import run_grid
from superinfer.core import Params
from superinfer.sim.run import RunSpec

AZURE = "../shared/data/traces/azure_conv_2023.csv"
POINTS = [  # (model, workload, rps)
    ("qwen2.5-32b", AZURE, 5.0), ("qwen2.5-32b", AZURE, 7.0), ("qwen2.5-32b", AZURE, 9.0),
    ("qwen2.5-32b", "sharegpt", 25.0), ("qwen2.5-32b", "sharegpt", 35.0),
    ("llama-3-8b", "sharegpt", 80.0),
]
SWEEPS = {
    "step_slo_share": [0.0, 0.6, 0.8, 1.0, 1.5],
    "slack_gate_s": [-3600.0, 0.0, 0.5, 1.0, 3.0],
    "rotation_margin_s": [0.0, 0.5, 2.0],
    "hopeless_last": [0, 1],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--base", default="", help="knob=value,... overriding the Params defaults of the base")
    ap.add_argument("--only", default="", help="comma-separated knobs to sweep (default: all)")
    a = ap.parse_args()
    base = Params().replace(**{k: float(v) if "." in v or "e" in v else int(v)
                               for k, v in (kv.split("=") for kv in a.base.split(",") if kv)})
    sweeps = {k: v for k, v in SWEEPS.items() if not a.only or k in a.only.split(",")}
    specs, tags = [], []
    for knob, values in sweeps.items():
        for v in values:
            p = base.replace(**{knob: v})
            for model, wl, rps in POINTS:
                for seed in range(a.seeds):
                    specs.append(RunSpec(policy="lvf", rps=rps, seed=seed, workload=wl, model=model,
                                         duration_s=a.duration, params=p, variant=f"{knob}={v}"))
                    tags.append((knob, v))
    for model, wl, rps in POINTS:  # the baselines at the same points
        for pol in ("vllm", "lvf-paper"):
            for seed in range(a.seeds):
                specs.append(RunSpec(policy=pol, rps=rps, seed=seed, workload=wl, model=model, duration_s=a.duration))
                tags.append((pol, None))
    runs = run_grid(specs, a.workers)
    for r, s in zip(runs, specs):
        r["model"], r["workload"] = s.model, s.workload
    table = {}
    for (knob, v), r in zip(tags, runs):
        key = f"{knob}={v}" if v is not None else knob
        t = table.setdefault(key, {"slo": [], "tok_s": [], "rotations": []})
        t["slo"].append(r["slo_attainment"])
        t["tok_s"].append(r["throughput_tok_s"])
        t["rotations"].append(r["rotations"])
    summary = {k: {"mean_slo_attainment": sum(v["slo"]) / len(v["slo"]),
                   "mean_tok_s": sum(v["tok_s"]) / len(v["tok_s"]),
                   "mean_rotations": sum(v["rotations"]) / len(v["rotations"])} for k, v in table.items()}
    out = {"command": "python bench/v2_sweep.py " + " ".join(sys.argv[1:]), "base": asdict(base),
           "points": POINTS, "sweeps": sweeps, "summary": summary, "runs": runs}
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=1, default=str)
    for k, v in summary.items():
        print(f"{k:<28} slo {100 * v['mean_slo_attainment']:5.1f} %  tok/s {v['mean_tok_s']:7.0f}  rot {v['mean_rotations']:8.0f}")


if __name__ == "__main__":
    main()
