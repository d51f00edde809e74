"""Build and run one twin from a spec: :class:`RunSpec` -> metrics (:func:`run_one`).

A run is independent and deterministic for its seed. The batch simulator's grids of runs, spread over a
process pool, are ``superinferd bench sim``'s (:mod:`superinfer.bench.twin.grid`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from superinfer.core import Params, TenantTable
from superinfer.sim.build import build_cost_model, overlaps, schedules_async
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator
from superinfer.sim.metrics import run_metrics
from superinfer.sim.models import get_model
from superinfer.sim.workload import load_workload


@dataclass(frozen=True)
class RunSpec:
    """Everything one simulated run needs, picklable."""

    policy: str
    rps: float | None  # None: only with arrival "trace", keep the trace's own arrival times
    seed: int
    workload: str = "chat"
    arrival: str = "poisson"
    duration_s: float = 120.0
    model: str = "llama-3-8b"
    hardware: str = "gh200"
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    b_xfer: int | None = None
    params: Params = field(default_factory=Params)
    tenants: TenantTable | None = None
    tenant_mix: tuple[tuple[str, float], ...] = ()
    dram_gib: float | None = None
    hbm_blocks: int | None = None  # None: from the model/hardware profile
    dram_blocks: int | None = None  # overrides dram_gib
    drain_s: float = 300.0
    sjf_noise: float = 0.0
    calibration: str | None = None
    gpu_costs: str = "datasheet"  # superinfer.sim.grounded.GPU_COSTS
    host_overlap: str = "auto"  # superinfer.sim.build.HOST_OVERLAP (grounded costs only)
    skip_bad: bool = False
    variant: str = ""
    shed_at_admission: bool = False


def cost_model(spec: RunSpec) -> CostModel:
    return build_cost_model(spec.model, spec.hardware, spec.block_size, calibration=spec.calibration,
                            gpu_costs=spec.gpu_costs, overlap=overlaps(spec.policy),
                            async_host=schedules_async(spec.policy, spec.host_overlap))


def run_one(spec: RunSpec) -> dict:
    model = get_model(spec.model)
    w = load_workload(spec.workload, arrival=spec.arrival, rps=spec.rps, duration_s=spec.duration_s,
                      seed=spec.seed, skip_bad=spec.skip_bad, tenants=dict(spec.tenant_mix) or None,
                      max_len=model.max_model_len)
    cm = cost_model(spec)
    tenants = spec.tenants or TenantTable()
    if spec.dram_blocks is not None:
        dram_blocks: int | None = spec.dram_blocks
    else:
        dram_blocks = None if spec.dram_gib is None else cm.dram_blocks(spec.dram_gib * (1 << 30))
    cfg = SimConfig(policy=spec.policy, max_num_seqs=spec.max_num_seqs,
                    max_num_batched_tokens=spec.max_num_batched_tokens, b_xfer=spec.b_xfer, params=spec.params,
                    tenants=tenants, hbm_blocks=spec.hbm_blocks, dram_blocks=dram_blocks, drain_s=spec.drain_s, sjf_noise=spec.sjf_noise,
                    seed=spec.seed, shed_at_admission=spec.shed_at_admission)
    trace = Simulator(w, cm, cfg).run()
    out = {"policy": spec.policy, "rps": spec.rps if spec.rps is not None else round(w.rate_rps, 6), "seed": spec.seed}
    if spec.variant:
        out["variant"] = spec.variant
    out.update(run_metrics(trace, tenants, w.duration_s or spec.duration_s))
    out["workload_skipped_lines"] = w.skipped_count
    return out

