"""Sweep RotaSched v2's knobs on the twin to choose its defaults by measurement (issue 10).

    .venv/bin/python bench/v2_sweep.py --out bench/results/v2_sweep.json [--duration 60 --seeds 1]
    .venv/bin/python bench/v2_sweep.py --set reasoning --out bench/results/reasoning/v2_sweep.json --seeds 2

Each knob is varied alone around a base setting, at loaded points of a set of workloads; the score is the
mean ``slo_attainment`` over the points (throughput and rotations are kept beside it). Nothing here is
tuned to a target: the default of each knob is the best value of its sweep, and the JSON keeps all.
``--set classic`` (issue 10): compute-bound traffic (Azure conversation, ShareGPT). ``--set reasoning``
(issue 27): long-output traffic where KV memory binds, the synthetic ``reasoning`` workload past the knee on
GH200 and H100-SXM, with the ``reasoning`` profile's SLOs (TTFT 10 s, TBT 100 ms) and a 400 GiB host pool;
its ``held_out`` points (ServeGen's DeepSeek-R1 clients, not swept on) score the base and each knob's best.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from superinfer.bench.twin.grid import run_grid
from superinfer.core import Params, Tenant, TenantTable
from superinfer.sim.run import RunSpec

AZURE = "../shared/data/traces/azure_conv_2023.csv"
SERVEGEN = "servegen:../shared/data/servegen/deepseek-r1"
SETS = {
    "classic": {
        "points": [  # (model, hardware, workload, rps)
            ("qwen2.5-32b", "gh200", AZURE, 5.0), ("qwen2.5-32b", "gh200", AZURE, 7.0),
            ("qwen2.5-32b", "gh200", AZURE, 9.0), ("qwen2.5-32b", "gh200", "sharegpt", 25.0),
            ("qwen2.5-32b", "gh200", "sharegpt", 35.0), ("llama-3-8b", "gh200", "sharegpt", 80.0),
        ],
        "held_out": [],
        "sweeps": {
            "step_slo_share": [0.0, 0.6, 0.8, 1.0, 1.5],
            "slack_gate_s": [-3600.0, 0.0, 0.5, 1.0, 3.0],
            "rotation_margin_s": [0.0, 0.5, 2.0],
            "hopeless_last": [0, 1],
        },
        "spec": {},
    },
    "reasoning": {
        "points": [
            ("qwen2.5-32b", "gh200", "reasoning", 3.5), ("qwen2.5-32b", "gh200", "reasoning", 4.0),
            ("qwen2.5-32b", "gh200", "reasoning", 4.5), ("qwen2.5-32b", "h100-sxm", "reasoning", 0.75),
            ("qwen2.5-32b", "h100-sxm", "reasoning", 1.0),
        ],
        "held_out": [("qwen2.5-32b", "gh200", SERVEGEN, 6.0), ("qwen2.5-32b", "gh200", SERVEGEN, 8.0),
                     ("qwen2.5-32b", "h100-sxm", SERVEGEN, 1.5)],
        "sweeps": {
            "slack_gate_s": [-3600.0, 0.0, 1.0, 3.0, 10.0, 30.0],
            "rotation_margin_s": [0.0, 0.5, 2.0, 5.0],
            "min_residency": [1, 4, 16, 64],
            "max_rotations": [16, 64, 256],
            "alpha": [1.0, 3.0, 10.0],
            "step_slo_share": [0.6, 0.8, 1.0, 1.5],
            "hopeless_last": [0, 1],
            "backfill": [0, 1],
        },
        "spec": {"tenants": TenantTable([Tenant("default", 10.0, 0.1, 1.0)]), "dram_gib": 400.0},
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="classic", choices=sorted(SETS), help="which points and knobs")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--base", default="", help="knob=value,... overriding the Params defaults of the base")
    ap.add_argument("--only", default="", help="comma-separated knobs to sweep (default: all)")
    a = ap.parse_args()
    base = Params().replace(**{k: float(v) if "." in v or "e" in v else int(v)
                               for k, v in (kv.split("=") for kv in a.base.split(",") if kv)})
    chosen = SETS[a.set]
    sweeps = {k: v for k, v in chosen["sweeps"].items() if not a.only or k in a.only.split(",")}

    def specs_at(points: list, policy: str, p: Params | None, tag: tuple) -> tuple[list, list]:
        out = [RunSpec(policy=policy, rps=rps, seed=seed, workload=wl, model=model, hardware=hw,
                       duration_s=a.duration, params=p or Params(), variant=f"{tag[0]}={tag[1]}", **chosen["spec"])
               for model, hw, wl, rps in points for seed in range(a.seeds)]
        return out, [tag] * len(out)

    specs, tags = [], []
    for knob, values in sweeps.items():
        for v in values:
            s, t = specs_at(chosen["points"], "lvf", base.replace(**{knob: v}), (knob, v))
            specs += s
            tags += t
    for pol in ("vllm", "lvf-paper") if a.set == "classic" else ("sarathi", "lvf-hbm"):  # baselines, same points
        s, t = specs_at(chosen["points"], pol, None, (pol, None))
        specs += s
        tags += t
    summary = _summary(tags, _run(specs, a.workers))
    out = {"command": "python bench/v2_sweep.py " + " ".join(sys.argv[1:]), "base": asdict(base),
           "set": a.set, "points": chosen["points"], "sweeps": sweeps, "summary": summary}
    if chosen["held_out"]:  # the base and each knob's best alone, on traffic the sweep never saw
        best = {k: max(vs, key=lambda v: summary[f"{k}={v}"]["mean_slo_attainment"]) for k, vs in sweeps.items()}
        hs, ht = specs_at(chosen["held_out"], "lvf", base, ("base", None))
        for k, v in best.items():
            if v == getattr(base, k):  # the base itself, scored above
                continue
            s, t = specs_at(chosen["held_out"], "lvf", base.replace(**{k: v}), (k, v))
            hs += s
            ht += t
        for pol in ("sarathi", "vllm-offload", "lvf-hbm"):
            s, t = specs_at(chosen["held_out"], pol, None, (pol, None))
            hs += s
            ht += t
        out["best"], out["held_out_points"] = best, chosen["held_out"]
        out["held_out"] = _summary(ht, _run(hs, a.workers))
    with open(a.out, "w") as fh:
        json.dump(out, fh, indent=1, default=str)
    for name in ("summary", "held_out"):
        for k, v in out.get(name, {}).items():
            print(f"{name:<9} {k:<28} slo {100 * v['mean_slo_attainment']:5.1f} %  tok/s {v['mean_tok_s']:7.0f}  "
                  f"rot {v['mean_rotations']:8.0f}")


def _run(specs: list, workers: int) -> list[dict]:
    runs = run_grid(specs, workers)
    for r, s in zip(runs, specs):
        r["model"], r["hardware"], r["workload"] = s.model, s.hardware, s.workload
    return runs


def _summary(tags: list, runs: list[dict]) -> dict:
    table: dict = {}
    for (knob, v), r in zip(tags, runs):
        key = f"{knob}={v}" if v is not None else knob
        t = table.setdefault(key, {"slo": [], "tok_s": [], "rotations": [], "runs": []})
        t["slo"].append(r["slo_attainment"])
        t["tok_s"].append(r["throughput_tok_s"])
        t["rotations"].append(r["rotations"])
        t["runs"].append({k: r.get(k) for k in ("model", "hardware", "workload", "rps", "seed", "slo_attainment",
                                                 "ttft_attainment", "tbt_attainment", "throughput_tok_s")})
    return {k: {"mean_slo_attainment": sum(v["slo"]) / len(v["slo"]), "mean_tok_s": sum(v["tok_s"]) / len(v["tok_s"]),
                "mean_rotations": sum(v["rotations"]) / len(v["rotations"]), "runs": v["runs"]} for k, v in table.items()}


if __name__ == "__main__":
    main()
