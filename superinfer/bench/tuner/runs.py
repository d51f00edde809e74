"""One strategy on one seed of a scenario, on the twin in virtual time: what ``bench tuner`` measures.

Strategies: ``paper`` (the paper's α 3, δ_B 0, δ_F 0.5 with the core's other defaults: the profile's
defaults), ``static_best`` (the study's robust setting over the whole scenario), ``oracle`` (the study's
best setting per phase, switched at the true phase boundaries; not run on a recorded trace, whose
boundaries are unknown) and ``tuner`` (the online controller, cold from the defaults, with the arms of a
study of a *different* trace; its seed is the configured seed plus the data seed). Every run replays the same
workload for a seed (:func:`~superinfer.tuner.offline.scenario.build`) through
:func:`~superinfer.tuner.offline.replay.replay` and is judged by ``superinfer.sim.metrics.run_metrics``;
the record adds the tuner's objective (weighted), per-phase attainment, a timeline in ``bin_s`` bins of
arrival time, the knob trajectory and the controller's decisions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from superinfer.sim.metrics import run_metrics
from superinfer.sim.models import get_model
from superinfer.tuner.arms import Arms, arms_from_dict
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.controller import Controller
from superinfer.tuner.offline.evaluate import TwinEnv, judge, objective
from superinfer.tuner.offline.replay import replay
from superinfer.tuner.offline.scenario import Scenario, build, get_scenario
from superinfer.tuner.space import KnobSpace

STRATEGIES = ("paper", "static_best", "oracle", "tuner")
PAPER = {"alpha": 3.0, "delta_b": 0.0, "delta_f": 0.5}


@dataclass(frozen=True)
class RunTask:
    strategy: str
    scenario: str
    seed: int
    env: TwinEnv
    static: dict[str, float] = field(default_factory=dict)  # static_best's setting
    oracle: dict[str, dict[str, float]] = field(default_factory=dict)  # phase name -> setting
    arms: dict = field(default_factory=dict)  # the tuner's arms file (as data)
    tuner: TunerConfig = field(default_factory=lambda: TunerConfig(mode="auto"))
    bin_s: float = 60.0
    scn: Scenario | None = None  # a scenario that is not built in (a recorded trace); else by name


def start_setting(cfg: TunerConfig) -> dict[str, float]:
    """Every strategy's start: the defaults of the knobs ``cfg`` tunes (``b_xfer`` at the host's budget,
    left out where there is none), the paper's α, δ_B, δ_F."""
    space = KnobSpace(cfg.knobs, cfg.step_caps, cfg.b_xfer_max)
    return dict(space.defaults) | {k: v for k, v in PAPER.items() if k in space.knobs}


def run_task(task: RunTask) -> dict[str, Any]:
    t0 = time.perf_counter()
    scn = task.scn or get_scenario(task.scenario)
    env = task.env
    w, bounds = build(scn, task.seed, get_model(env.model).max_model_len)
    table = scn.table()
    start = start_setting(task.tuner)
    cfg = env.sim_config(table, start, task.seed)
    schedule: list[tuple[float, dict[str, float]]] = []
    factory: Callable[[Callable], Controller] | None = None
    decisions: list[dict] = []
    if task.strategy == "static_best":
        schedule = [(0.0, dict(task.static))]
    elif task.strategy == "oracle":
        schedule = [(s, dict(task.oracle[name])) for name, s, _ in bounds]
    elif task.strategy == "tuner":
        arms: Arms = arms_from_dict(task.arms, "warm-start arms")
        tenants = {t.name: (t.ttft_slo, t.weight) for t in table.tenants}

        # each seed its own exploration path (the bandit's draws, the local search's sampler): with one
        # tuner seed for every data seed, all runs tried the same local steps in the same order
        tcfg = replace(task.tuner, seed=task.tuner.seed + task.seed)

        factory = partial(make_controller, tcfg, tenants, start, arms, decisions)
    elif task.strategy != "paper":
        raise ValueError(f"unknown strategy {task.strategy!r}; valid: {', '.join(STRATEGIES)}")
    res = replay(w, env.cost_model(), cfg, schedule=schedule, controller_factory=factory)
    m = run_metrics(res.trace, table, w.duration_s)
    ok, ten = judge(res.trace, table)
    value, per_tenant = objective(ok, ten, table)
    out: dict[str, Any] = {"strategy": task.strategy, "scenario": task.scenario, "seed": task.seed,
                           "weighted_slo_attainment": value, **{k: m[k] for k in (
                               "slo_attainment", "ttft_attainment", "tbt_attainment", "arrived", "finished",
                               "ttft_p99_s", "throughput_tok_s", "rotations", "iterations", "sim_s")}}
    out["per_tenant"] = per_tenant
    out["phases"] = _phases(res.trace.t_arr, ok, ten, table, bounds)
    out["bounds"] = [[n, s, e] for n, s, e in bounds]
    out["timeline"] = _timeline(res.trace.t_arr, ok, w.duration_s, task.bin_s)
    out["trajectory"] = [[round(t, 3), v] for t, v in res.trajectory]
    out["decisions"] = decisions
    if res.controller is not None:
        c = res.controller
        out["rollbacks"] = sum(c.counts["rollbacks"].values())
        out["trials"] = dict(c.counts["trials"])
        out["exploration_fraction"] = c.explore_s / c.observed_s if c.observed_s > 0 else 0.0
    out["wall_s"] = time.perf_counter() - t0
    return out


def make_controller(cfg: TunerConfig, tenants: dict, start: dict, arms: Arms, decisions: list[dict],
                writer: Callable) -> Controller:
    """The tuner of one run, its decisions appended to ``decisions``."""
    return Controller(cfg, tenants, start, writer=writer, arms=arms, now=0.0,
                      on_decision=lambda d: decisions.append(d.as_dict()))


def _phases(t_arr: np.ndarray, ok: np.ndarray, ten: np.ndarray, table, bounds) -> list[dict]:
    out = []
    for name, s, e in bounds:
        mask = (t_arr >= s) & (t_arr < e)
        value, per = objective(ok[mask], ten[mask], table)
        out.append({"phase": name, "start": s, "end": e, "requests": int(mask.sum()),
                    "slo_attainment": float(ok[mask].mean()) if mask.any() else None,
                    "weighted": value, "per_tenant": per})
    return out


def _timeline(t_arr: np.ndarray, ok: np.ndarray, duration_s: float, bin_s: float) -> dict[str, list]:
    edges = np.arange(0.0, duration_s + bin_s, bin_s)
    idx = np.clip(np.digitize(t_arr, edges) - 1, 0, len(edges) - 2)
    n = np.bincount(idx, minlength=len(edges) - 1)
    hits = np.bincount(idx, weights=ok.astype(np.float64), minlength=len(edges) - 1)
    att = np.where(n > 0, hits / np.maximum(n, 1), np.nan)
    return {"t": edges[:-1].round(3).tolist(), "arrivals": n.tolist(),
            "attainment": [None if np.isnan(a) else round(float(a), 4) for a in att]}
