"""``bench tuner --profile NAME``: may the profile ship its tuner deciding (``auto``), or only watching?

The question an operator asks before turning the tuner on: on my own traffic, with no study behind it,
does it cost me anything? Each seed replays the profile's own traffic (``[sim]`` workload, arrival, rate
and tenant shares, ``duration_s`` of it; :func:`~superinfer.daemon.profile_twin.traffic_of`) on the
profile's own twin (:func:`~superinfer.daemon.profile_twin.twin_of`: the daemon's engine limits,
``B_xfer``, host tier, tenants and knobs) twice, on the same requests:

* ``static``: the profile's knobs, never changed (the tuner ``off``, or in ``shadow``: it writes nothing);
* ``tuner``: the profile's ``[tuner]`` settings (``superinfer.daemon.tuning.tuner_config``) in ``auto``,
  cold from the profile's knobs, with the profile's arms file if it names one; no fleet.

Per seed: attainment (both SLOs, TTFT, TBT), throughput, the tuner's decisions and verdicts, rollbacks
per hour and when it first proposed or tried anything. Summary: ``tuner - static`` paired per seed with a
Student-t 95 % interval, and the verdict by the rule fixed before any run (:data:`RULE`).
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

from superinfer.bench.engine.paired import paired_difference
from superinfer.sim.metrics import run_metrics
from superinfer.tuner.offline.evaluate import judge, objective
from superinfer.tuner.offline.replay import replay
from superinfer.tuner.offline.scenario import build

#: when ``auto`` is safe to ship (written before the first run): the tuner's mean loss against the
#: profile's static knobs is at most 1 pp (the stationary target of docs/tuner.md), the 95 % interval's
#: lower end at most 2 pp below, and at most one rollback per hour; else ``shadow``
RULE = {"mean_pp_min": -1.0, "ci_low_pp_min": -2.0, "rollbacks_per_hour_max": 1.0}
ACTING = ("propose", "trial", "jump", "fallback", "accept", "reject", "rollback", "adopt")


@dataclass(frozen=True)
class ProfileTask:
    strategy: str  # static | tuner
    profile: str | None
    profile_file: str | None
    sets: tuple[str, ...]
    seed: int
    duration_s: float


def _config(task: ProfileTask):
    from superinfer.daemon.config import resolve

    return resolve(task.profile, profile_file=task.profile_file, flags={}, sets=list(task.sets))


def run_profile_task(task: ProfileTask) -> dict[str, Any]:
    """One strategy on one seed of the profile's traffic (module docstring)."""
    from superinfer.daemon.profile_twin import traffic_of, twin_of
    from superinfer.daemon.tuning import tuner_config
    from superinfer.bench.tuner.runs import make_controller
    from superinfer.tuner import load_arms
    from superinfer.tuner.arms import empty_arms

    t0 = time.perf_counter()
    cfg = _config(task)
    cm, simcfg = twin_of(cfg)
    simcfg = replace(simcfg, seed=task.seed)
    scn = traffic_of(cfg, duration_s=task.duration_s)
    w, _ = build(scn, task.seed, cm.model.max_model_len)
    table = simcfg.tenants
    decisions: list[dict] = []
    factory = None
    if task.strategy == "tuner":
        from superinfer.sim.engine import transfer_budget

        budgeted, b_xfer = transfer_budget(cm, simcfg)
        tcfg = tuner_config(cfg, b_xfer if budgeted else None)
        tcfg = replace(tcfg, mode="auto", seed=tcfg.seed + task.seed)
        path = cfg.get("tuner", "arms_file")
        arms = load_arms(path) if path else empty_arms()
        tenants = {t.name: (t.ttft_slo, t.weight) for t in table.tenants}
        start = {k: float(b_xfer) if k == "b_xfer" else float(getattr(simcfg.params, k)) for k in tcfg.knobs}
        factory = partial(make_controller, tcfg, tenants, start, arms, decisions)
    elif task.strategy != "static":
        raise ValueError(f"unknown strategy {task.strategy!r}; valid: static, tuner")
    res = replay(w, cm, simcfg, controller_factory=factory)
    m = run_metrics(res.trace, table, w.duration_s)
    ok, ten = judge(res.trace, table)
    value, per_tenant = objective(ok, ten, table)
    out: dict[str, Any] = {"strategy": task.strategy, "seed": task.seed, "weighted_slo_attainment": value,
                           "per_tenant": per_tenant, **{k: m[k] for k in (
                               "slo_attainment", "ttft_attainment", "tbt_attainment", "arrived", "finished",
                               "ttft_p99_s", "throughput_tok_s", "rotations")}}
    if res.controller is not None:
        c = res.controller
        acting = [d for d in decisions if d["action"] in ACTING]
        out.update(rollbacks=sum(c.counts["rollbacks"].values()), trials=dict(c.counts["trials"]),
                   jumps=c.counts["jumps"], first_decision_s=acting[0]["at"] if acting else None,
                   decisions={a: sum(d["action"] == a for d in decisions) for a in sorted({d["action"] for d in decisions})},
                   final=res.trajectory[-1][1] if res.trajectory else {},
                   in_candidate_share=c.explore_s / c.observed_s if c.observed_s > 0 else 0.0,
                   log=decisions)
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    return out


def run_profile_bench(profile: str | None, profile_file: str | None, sets: tuple[str, ...], seeds: int,
                      duration_s: float, jobs: int, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Both strategies on seeds ``0 .. seeds - 1``, interleaved in a process pool; the summary and verdict."""
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    cfg = _config(ProfileTask("static", profile, profile_file, sets, 0, duration_s))
    tasks = [ProfileTask(s, profile, profile_file, sets, seed, duration_s)
             for seed in range(seeds) for s in ("tuner", "static")]
    runs: list[dict] = []
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(run_profile_task, tasks):
            runs.append(r)
            say(f"  {cfg.profile:<12} {r['strategy']:<7} seed {r['seed']}: SLO attainment "
                f"{100 * r['slo_attainment']:.1f} % ({r['wall_s']:.0f} s)")
    res = summarise_profile(runs, duration_s)
    g = cfg.get
    res["settings"] = {"profile": cfg.profile, "sets": list(sets), "seeds": seeds, "duration_s": duration_s,
                       "model": g("engine", "model"), "hardware": g("engine", "hardware"),
                       "workload": g("sim", "workload"), "arrival": g("sim", "arrival"), "rps": g("sim", "rps"),
                       "shipped_mode": g("tuner", "mode"), "knobs": list(g("tuner", "knobs")),
                       "arms_file": g("tuner", "arms_file")}
    res["runs"] = runs
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def summarise_profile(runs: list[dict], duration_s: float) -> dict[str, Any]:
    """Paired ``tuner - static`` per seed (both SLOs, TTFT, TBT), the tuner's activity, and the verdict."""
    by = {s: sorted((r for r in runs if r["strategy"] == s), key=lambda r: r["seed"]) for s in ("static", "tuner")}
    if [r["seed"] for r in by["static"]] != [r["seed"] for r in by["tuner"]]:
        raise ValueError("summary: static and tuner runs are not paired by seed")
    tu, st = by["tuner"], by["static"]
    diff = {k: paired_difference([r[k] for r in tu], [r[k] for r in st])
            for k in ("slo_attainment", "ttft_attainment", "tbt_attainment")}
    hours = len(tu) * (duration_s / 3600.0)
    rollbacks = sum(r["rollbacks"] for r in tu)
    accepted = sum(r["trials"].get("accept", 0) for r in tu)
    firsts = sorted(r["first_decision_s"] for r in tu if r["first_decision_s"] is not None)
    d = diff["slo_attainment"]
    lo = d["ci95_pp"][0] if d["ci95_pp"] else float("nan")
    rate = rollbacks / hours if hours > 0 else float("nan")
    safe = d["mean_pp"] >= RULE["mean_pp_min"] and lo >= RULE["ci_low_pp_min"] and rate <= RULE["rollbacks_per_hour_max"]
    mean = {s: {k: sum(r[k] for r in rs) / len(rs) for k in ("slo_attainment", "ttft_attainment", "tbt_attainment")}
            for s, rs in by.items() if rs}
    return {"mean": mean, "tuner_minus_static": diff,
            "tuner": {"rollbacks_per_hour": rate, "accepted": accepted, "trials": sum(sum(r["trials"].values()) for r in tu),
                      "jumps": sum(r["jumps"] for r in tu),
                      "first_decision_s_median": firsts[len(firsts) // 2] if firsts else None},
            "rule": RULE, "verdict": "auto" if safe else "shadow"}
