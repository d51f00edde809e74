"""A profile's twin and its traffic, built in one place for everything that runs a profile on the twin.

The ``sim`` backend serves with :func:`twin_of`; ``superinferd tune`` studies, and ``bench tuner
--profile`` judges, the traffic of :func:`traffic_of` on that same twin, so what they measure is what the
daemon runs (engine limits, ``B_xfer``, the host tier from ``[engine] dram_gib``, the tenants, the knobs).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from superinfer.sim.build import build_cost_model, schedules_async
from superinfer.sim.engine import SimConfig, reference_iteration_s
from superinfer.tuner.offline.scenario import Phase, Scenario, Segment

if TYPE_CHECKING:
    from superinfer.daemon.config import Config
    from superinfer.sim.costmodel import CostModel

GIB = 1 << 30


def twin_of(cfg: Config) -> tuple[CostModel, SimConfig]:
    """The cost model and simulator settings of the profile's twin: ``B_xfer`` ``auto`` is what the cost
    model allows in the reference iteration, the host tier is ``[engine] dram_gib`` (at most the hardware's
    DRAM), the knobs are ``[scheduler]``'s and the seed is ``[sim] seed``."""
    g = cfg.get
    cm = build_cost_model(g("engine", "model"), g("engine", "hardware"), g("engine", "block_size"),
                          gpu_costs=g("engine", "gpu_costs"),
                          async_host=schedules_async(g("scheduler", "policy"),
                                                     "none" if g("engine", "async_scheduling") == "off" else "auto"))
    b = g("scheduler", "b_xfer")
    if b == "auto":
        b = cm.default_b_xfer(reference_iteration_s(cm, g("engine", "max_num_seqs")), g("scheduler", "eta"))
    simcfg = SimConfig(policy=g("scheduler", "policy"), max_num_seqs=g("engine", "max_num_seqs"),
                       max_num_batched_tokens=g("engine", "max_num_batched_tokens"), b_xfer=b, params=cfg.params(),
                       tenants=cfg.tenant_table(),
                       dram_blocks=cm.dram_blocks(min(g("engine", "dram_gib") * GIB, cm.hardware.dram_bytes)),
                       seed=g("sim", "seed"))
    return cm, simcfg


def traffic_of(cfg: Config, workload: str | None = None, arrival: str | None = None, rps: float | None = None,
               duration_s: float = 180.0, model: str | None = None, hardware: str | None = None) -> Scenario:
    """The profile's ``[sim]`` traffic as a one-phase scenario over its tenants (replay shares as the mix);
    arguments override the profile. Raises ``ValueError`` when the rate is 0 (a profile that replays
    nothing has no traffic to measure)."""
    g = cfg.get
    wl = workload or g("sim", "workload")
    rate = rps or g("sim", "rps")
    if not rate:
        raise ValueError(f"profile {cfg.profile!r} replays no traffic ([sim] rps = 0): give a rate")
    mix = tuple((t, s) for t, s in cfg.tenant_shares.items() if s > 0)
    name = os.path.basename(wl)
    seg = Segment(wl, float(rate), float(duration_s), arrival or g("sim", "arrival"), mix)
    return Scenario(name, (Phase(name, (seg,)),), tuple(cfg.tenants), model or g("engine", "model"),
                    hardware or g("engine", "hardware"))
