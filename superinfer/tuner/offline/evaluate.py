"""One setting on the twin: each phase of a scenario simulated on its own, with shared seeds.

:class:`TwinEnv` is the engine a study evaluates on (model, hardware, engine limits, tenants). For a
setting, :func:`evaluate` runs every phase of the scenario alone for ``eval_s`` seconds (its own
workload: :func:`~superinfer.tuner.offline.scenario.phase_workload`) for every seed, and returns per
phase the objective (the tuner's: weighted share of arrived requests meeting both SLOs, tenant weights
from the table; a request still unfinished after the drain is a miss, as ``superinfer.sim.metrics``
judges it) and per-tenant attainment. Seeds are the same for every setting (common random numbers), so
two settings are compared on the same requests.

:func:`evaluate_trace` is the hindsight judge of ``bench tuner``'s baselines: the setting held over the
whole scenario exactly as the strategies replay it (:func:`~superinfer.tuner.offline.scenario.build`,
:func:`~superinfer.tuner.offline.replay.replay`), so a study's value for a setting is what the
``static_best`` run with that setting scores on the same seeds; per phase, the requests that arrived in
it (a phase name occurring twice pools both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from superinfer.core import INTEGER_PARAMS, Params, TenantTable
from superinfer.sim.build import build_cost_model, schedules_async
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator, Trace, transfer_budget
from superinfer.sim.models import get_model
from superinfer.sim.workload import Workload
from superinfer.tuner.offline.replay import replay
from superinfer.tuner.offline.scenario import Scenario, build, phase_workload


@dataclass(frozen=True)
class TwinEnv:
    model: str = "qwen2.5-32b"
    hardware: str = "gh200"
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    b_xfer: int | None = None
    dram_blocks: int | None = None
    drain_s: float = 60.0
    policy: str = "lvf"
    base: dict[str, float] = field(default_factory=dict)  # knob values a setting does not name
    gpu_costs: str = "datasheet"  # superinfer.sim.grounded.GPU_COSTS

    def cost_model(self) -> CostModel:
        return build_cost_model(self.model, self.hardware, self.block_size, gpu_costs=self.gpu_costs,
                                async_host=schedules_async(self.policy))

    def b_xfer_max(self) -> int:
        """The tuned ``b_xfer``'s bound: the transfer budget of the twin's host (``b_xfer``, else its
        hardware's link for one reference iteration, as the simulator sets it); 0 for a policy that
        moves no KV under a budget (nothing to tune)."""
        budgeted, b = transfer_budget(self.cost_model(), self.sim_config(TenantTable(), {}, 0))
        return int(b) if budgeted else 0

    def sim_config(self, tenants: TenantTable, values: dict[str, float], seed: int) -> SimConfig:
        merged = {**self.base, **values}
        b_xfer = int(merged["b_xfer"]) if "b_xfer" in merged else self.b_xfer
        return SimConfig(policy=self.policy, max_num_seqs=self.max_num_seqs,
                         max_num_batched_tokens=self.max_num_batched_tokens, b_xfer=b_xfer,
                         params=params_of(merged), tenants=tenants, dram_blocks=self.dram_blocks,
                         drain_s=self.drain_s, seed=seed)


def params_of(values: dict[str, float]) -> Params:
    """The core's ``Params`` of a setting (its ``b_xfer``, the engine's knob, goes to ``SimConfig``)."""
    return Params().replace(**{k: int(v) if k in INTEGER_PARAMS else float(v) for k, v in values.items()
                               if k != "b_xfer"})


def judge(trace: Trace, tenants: TenantTable) -> tuple[np.ndarray, np.ndarray]:
    """Per request: (met both SLOs, tenant index), judged as ``superinfer.sim.metrics.run_metrics``."""
    s_f, s_b = tenants.ttft_slo[trace.tenant], tenants.tbt_slo[trace.tenant]
    has_first = ~np.isnan(trace.t_first)
    finished = ~np.isnan(trace.t_end)
    ttft_ok = has_first & (np.where(has_first, trace.t_first - trace.t_arr, np.inf) <= s_f)
    gaps_n = np.maximum(trace.outputs - 1, 0)
    span = np.where(has_first, trace.last_token - trace.t_first, 0.0)
    tbt_ok = np.where(gaps_n > 0, span / np.maximum(gaps_n, 1) <= s_b, finished)
    return ttft_ok & tbt_ok, trace.tenant


def objective(ok: np.ndarray, tenant: np.ndarray, tenants: TenantTable) -> tuple[float, dict[str, float]]:
    """(weighted share meeting both SLOs, per-tenant share) of the requests given."""
    w = tenants.weight[tenant] if tenant.size else np.zeros(0)
    value = float((w * ok).sum() / w.sum()) if w.sum() > 0 else math.nan
    per = {t.name: float(ok[tenant == i].mean()) for i, t in enumerate(tenants.tenants) if (tenant == i).any()}
    return value, per


def run_phase(env: TwinEnv, tenants: TenantTable, w: Workload, values: dict[str, float], seed: int) -> Trace:
    return Simulator(w, env.cost_model(), env.sim_config(tenants, values, seed)).run()


def evaluate(env: TwinEnv, scn: Scenario, values: dict[str, float], seeds: list[int], eval_s: float,
             phases: list[str] | None = None) -> dict[str, dict]:
    """``{phase: {"score", "per_tenant", "requests"}}`` for ``values`` (see the module docstring).
    ``phases``: the phase names to run (default all; a name occurring twice is run once)."""
    tenants = scn.table()
    max_len = get_model(env.model).max_model_len
    seen: dict[str, dict] = {}
    for ph in scn.phases:
        if ph.name in seen or (phases is not None and ph.name not in phases):
            continue
        oks, tens = [], []
        for seed in seeds:
            w = phase_workload(scn, ph, seed, min(eval_s, ph.duration_s), max_len)
            ok, ten = judge(run_phase(env, tenants, w, values, seed), tenants)
            oks.append(ok)
            tens.append(ten)
        ok, ten = np.concatenate(oks), np.concatenate(tens)
        value, per = objective(ok, ten, tenants)
        seen[ph.name] = {"score": value, "per_tenant": per, "requests": int(ok.size)}
    return seen


def evaluate_trace(env: TwinEnv, scn: Scenario, values: dict[str, float], seeds: list[int]) -> dict:
    """``{"score", "per_tenant", "requests", "phases": {phase: {"score", "per_tenant", "requests"}}}`` of
    ``values`` held over the whole of ``scn`` on every seed (see the module docstring), requests pooled."""
    tenants = scn.table()
    max_len = get_model(env.model).max_model_len
    oks, tens, names = [], [], []
    for seed in seeds:
        w, bounds = build(scn, seed, max_len)
        trace = replay(w, env.cost_model(), env.sim_config(tenants, values, seed)).trace
        ok, ten = judge(trace, tenants)
        label = np.full(ok.size, "", dtype=object)
        for name, s, e in bounds:
            label[(trace.t_arr >= s) & (trace.t_arr < e)] = name
        oks.append(ok)
        tens.append(ten)
        names.append(label)
    ok, ten, label = np.concatenate(oks), np.concatenate(tens), np.concatenate(names)
    value, per = objective(ok, ten, tenants)
    phases: dict[str, dict] = {}
    for ph in scn.phases:
        mask = label == ph.name
        if ph.name not in phases and mask.any():
            v, p = objective(ok[mask], ten[mask], tenants)
            phases[ph.name] = {"score": v, "per_tenant": p, "requests": int(mask.sum())}
    return {"score": value, "per_tenant": per, "requests": int(ok.size), "phases": phases}


def weights_of(scn: Scenario) -> dict[str, float]:
    """Each phase name's share of the scenario's time (a name occurring twice adds up)."""
    total = scn.duration_s
    out: dict[str, float] = {}
    for ph in scn.phases:
        out[ph.name] = out.get(ph.name, 0.0) + ph.duration_s / total
    return out


def workload_features(w: Workload) -> dict[str, float]:
    """The tuner's phase features (``superinfer.tuner.phase``) of a whole workload."""
    n = len(w)
    out = {"log_rate": math.log(max(n, 0.5) / max(w.duration_s, 1e-9))}
    if n:
        out["log_prompt"] = float(np.log(np.maximum(w.prompt_tokens, 1)).mean())
        for i, name in enumerate(w.tenant_names):
            out[f"share:{name}"] = float((w.tenant_ids == i).mean())
    return out
