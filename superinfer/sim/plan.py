"""Capacity planning on the twin (issue 14): the fewest GPUs that meet an SLO attainment target at a rate.

The search, in order of GPU count:

1. every layout ``(tp, pp)`` with ``tp`` in :data:`TP_CHOICES`, ``pp`` in :data:`PP_CHOICES` and
   ``tp·pp <= max_gpus`` is checked statically (:func:`superinfer.sim.parallel.feasibility`): vLLM's
   divisibility rules, weights per GPU, at least one ``max_model_len`` sequence of KV per micro-batch
   engine. Infeasible layouts are listed with the reason and never simulated;
2. for ``g = 1, 2, ... max_gpus``, every feasible layout whose replica size divides ``g`` is simulated with
   ``g / (tp·pp)`` replicas behind the balancer, under each policy, on the same workload (same seeds);
3. the search stops after the first ``g`` at which some configuration's SLO attainment (both SLOs, the
   mean over seeds) reaches the target; ``best`` is the one of those with the highest attainment, then
   the highest throughput. Nothing with more GPUs is simulated.

Every simulation is independent and deterministic for its seed; a level's simulations run in a process
pool, so results do not depend on the number of workers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from superinfer.core import Tenant, TenantTable
from superinfer.sim.build import build_cost_model, overlaps, schedules_async
from superinfer.sim.engine import SIM_POLICIES, SimConfig
from superinfer.sim.fabric import get_fabric
from superinfer.sim.fleet import BALANCERS, Fleet
from superinfer.sim.grounded import gpu_cost_terms
from superinfer.sim.hardware import get_hardware
from superinfer.sim.layout import PP_CHOICES, TP_CHOICES, Layout
from superinfer.sim.metrics import run_metrics
from superinfer.sim.models import get_model
from superinfer.sim.parallel import feasibility, layout_summary
from superinfer.sim.workload import load_workload

#: the keys of one simulated configuration in ``plan --json`` (issue 14), then extra detail
CONFIG_KEYS = ("tp", "pp", "replicas", "gpus", "policy", "slo_attainment", "ttft_attainment", "tbt_attainment",
               "throughput_tok_s")


@dataclass(frozen=True)
class PlanSpec:
    """What to plan for. Validated on construction (ValueError naming the field)."""

    model: str
    hardware: str
    rps: float
    workload: str = "chat"
    arrival: str = "poisson"
    slo_target: float = 0.95
    max_gpus: int = 16
    policies: tuple[str, ...] = ("vllm", "lvf")
    balancer: str = "least-loaded"
    fabric: str | None = None
    duration_s: float = 60.0
    seeds: int = 1
    ttft_slo: float = 5.0
    tbt_slo: float = 0.1
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    drain_s: float = 60.0
    tp_choices: tuple[int, ...] = TP_CHOICES
    pp_choices: tuple[int, ...] = PP_CHOICES
    gpu_costs: str = "datasheet"  # superinfer.sim.grounded.GPU_COSTS

    def __post_init__(self) -> None:
        gpu_cost_terms(self.gpu_costs)
        get_model(self.model)
        get_fabric(get_hardware(self.hardware).name, self.fabric)
        if not (isinstance(self.rps, (int, float)) and self.rps > 0):
            raise ValueError(f"rps: expected a number > 0, got {self.rps!r}")
        if not 0 < self.slo_target <= 1:
            raise ValueError(f"slo_target: expected a share in (0, 1], got {self.slo_target!r}")
        for name in ("max_gpus", "seeds", "block_size", "max_num_seqs", "max_num_batched_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
        bad = [p for p in self.policies if p not in SIM_POLICIES]
        if bad or not self.policies:
            raise ValueError(f"policies: unknown {bad}; valid: {', '.join(SIM_POLICIES)}")
        if self.balancer not in BALANCERS:
            raise ValueError(f"balancer: expected one of {', '.join(BALANCERS)}, got {self.balancer!r}")
        if self.duration_s <= 0 or self.drain_s < 0:
            raise ValueError("duration_s must be > 0 and drain_s >= 0")
        if not self.tp_choices or not self.pp_choices or any(x < 1 for x in self.tp_choices + self.pp_choices):
            raise ValueError("tp_choices and pp_choices: expected non-empty lists of integers >= 1")


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    replicas: int
    policy: str

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas


def layouts(spec: PlanSpec) -> tuple[list[Layout], list[dict]]:
    """Feasible layouts, and the infeasible ones as ``configs`` entries (``feasible: false`` + reason)."""
    model, hw = get_model(spec.model), get_hardware(spec.hardware)
    fabric = get_fabric(hw.name, spec.fabric)
    ok: list[Layout] = []
    bad: list[dict] = []
    for tp in sorted(set(spec.tp_choices)):
        for pp in sorted(set(spec.pp_choices)):
            lay = Layout(tp, pp)
            if lay.world > spec.max_gpus:
                continue
            why = feasibility(model, hw, lay, block_size=spec.block_size,
                              max_num_batched_tokens=spec.max_num_batched_tokens, fabric=fabric)
            if why is None:
                ok.append(lay)
            else:
                bad.append({"tp": tp, "pp": pp, "replicas": None, "gpus": lay.world, "policy": None,
                            "slo_attainment": None, "ttft_attainment": None, "tbt_attainment": None,
                            "throughput_tok_s": None, "feasible": False, "reason": why})
    return ok, bad


def levels(spec: PlanSpec, feasible: list[Layout]) -> list[tuple[int, list[Candidate]]]:
    """``(gpus, candidates)`` for every GPU count some feasible layout reaches, ascending."""
    out = []
    for g in range(1, spec.max_gpus + 1):
        cands = [Candidate(lay.tp, lay.pp, g // lay.world, p) for lay in feasible if g % lay.world == 0
                 for p in spec.policies]
        if cands:
            out.append((g, cands))
    return out


def evaluate(spec: PlanSpec, cand: Candidate) -> dict:
    """Simulate one configuration on every seed; the means, in ``configs`` form."""
    model = get_model(spec.model)
    cm = build_cost_model(model, spec.hardware, spec.block_size, gpu_costs=spec.gpu_costs,
                          overlap=overlaps(cand.policy), layout=Layout(cand.tp, cand.pp), fabric=spec.fabric,
                          async_host=schedules_async(cand.policy))
    tenants = TenantTable([Tenant("default", spec.ttft_slo, spec.tbt_slo)])
    runs = []
    for seed in range(spec.seeds):
        w = load_workload(spec.workload, arrival=spec.arrival, rps=spec.rps, duration_s=spec.duration_s, seed=seed,
                          max_len=model.max_model_len)
        cfg = SimConfig(policy=cand.policy, max_num_seqs=spec.max_num_seqs,
                        max_num_batched_tokens=spec.max_num_batched_tokens, tenants=tenants, drain_s=spec.drain_s,
                        seed=seed)
        trace = Fleet(w, cm, cfg, replicas=cand.replicas, pp=cand.pp, balancer=spec.balancer).run()
        runs.append(run_metrics(trace, tenants, w.duration_s or spec.duration_s))
    mean = {k: float(np.mean([r[k] for r in runs])) for k in
            ("slo_attainment", "ttft_attainment", "tbt_attainment", "throughput_tok_s", "ttft_p99_s", "rotations",
             "wall_s")}
    out = {"tp": cand.tp, "pp": cand.pp, "replicas": cand.replicas, "gpus": cand.gpus, "policy": cand.policy,
           **{k: round(mean[k], 6) for k in CONFIG_KEYS[5:]}, "feasible": True,
           "meets_target": mean["slo_attainment"] >= spec.slo_target, "seeds": spec.seeds,
           "ttft_p99_s": round(mean["ttft_p99_s"], 4), "rotations": round(mean["rotations"], 1),
           "sim_wall_s": round(mean["wall_s"] * spec.seeds, 3)}
    out["layout"] = layout_summary(cm, spec.max_num_batched_tokens)
    return out


def _evaluate_args(args: tuple[PlanSpec, Candidate]) -> dict:
    return evaluate(*args)


def choose(configs: list[dict], target: float) -> dict | None:
    """Among simulated configurations meeting ``target``: fewest GPUs, then highest SLO attainment, then
    lowest P99 TTFT (the latency headroom; throughput is the offered load once the SLOs hold), then highest
    throughput, then the order given."""
    ok = [c for c in configs if c.get("feasible") and c["slo_attainment"] >= target]
    if not ok:
        return None
    return min(ok, key=lambda c: (c["gpus"], -c["slo_attainment"], c.get("ttft_p99_s", 0.0), -c["throughput_tok_s"]))


def search(spec: PlanSpec, progress: Callable[[dict, int, int], None] | None = None,
           workers: int | None = None) -> dict:
    """Run the search (module docstring). ``progress(config, done, total_so_far)`` after each simulation."""
    feasible, infeasible = layouts(spec)
    configs: list[dict] = []
    plan = levels(spec, feasible)
    total = sum(len(c) for _, c in plan)
    done = 0
    best = None
    workers = workers or min(2, os.cpu_count() or 1)
    pool = ProcessPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        for _, cands in plan:
            args = [(spec, c) for c in cands]
            results = pool.map(_evaluate_args, args) if pool else map(_evaluate_args, args)
            for res in results:
                configs.append(res)
                done += 1
                if progress is not None:
                    progress(res, done, total)
            best = choose(configs, spec.slo_target)
            if best is not None:
                break
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return {"spec": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()},
            "configs": infeasible + configs, "best": best, "simulated": len(configs),
            "not_simulated": total - len(configs)}
