"""The controller as plain data: its status (``GET /v1/tuner``) and its persisted state (restored at the
next start).

Times: the controller runs on its caller's clock; ``to_wall`` maps a controller time to Unix seconds
for what operators read (``last_decisions[].at``) and for what must survive a restart (rollback times),
and ``from_wall`` maps back. Persisted: mode (with the profile's mode it overrode), the operator freeze,
rollback times, the exploration budget's charges, the bandit's posteriors, the trust radius, counters, the last decisions. Not persisted:
windows, baselines and the traffic phase (measured afresh after a restart), a trial (the controller
writes the incumbent back when it stops, so none survives).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from superinfer.tuner import stats
from superinfer.tuner.controller import Controller
from superinfer.tuner.decisions import Decision

STATE_VERSION = 1
Clock = Callable[[float], float]


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def status(c: Controller, now: float, to_wall: Clock = lambda t: t, last: int = 20) -> dict[str, Any]:
    """The ``GET /v1/tuner`` document (contract: docs/daemon.md)."""
    cfg = c.cfg
    reason = c.freeze.reason(now)
    trial = c.trial
    base = c.baseline
    if trial is not None:
        cand, base = c.trials.scores(now)
    return {
        "mode": c.mode,
        "state": c.state,
        "frozen": reason is not None,
        "frozen_reason": c.freeze.describe(now),
        "incumbent": c.space.values(c.incumbent),
        "candidate": None if c.candidate is None else c.space.values(c.candidate),
        "phase": c.phase,
        "last_decisions": [decision_dict(d, to_wall) for d in list(c.decisions)[-last:]],
        "rollbacks_last_hour": c.freeze.rollbacks_last_hour(now),
        "exploration_budget": {"share": c.budget.share, "allowance": c.budget.allowance,
                               "spent_last_hour": round(c.budget.spent(now), 3),
                               "local_steps_allowed": c.budget.allows(now)},
        "trial": None if trial is None else {
            "arm": trial.arm, "started_at": round(to_wall(trial.started), 3),
            "window": {"start_at": round(to_wall(trial.sb.start), 3), "end_at": round(to_wall(trial.sb.end), 3)},
            "switchback": {"slot": trial.sb.k, "slots": trial.sb.slots, "slot_s": trial.sb.slot_s,
                           "warmup_s": trial.sb.warmup_s, "running": trial.sb.side_now()},
            "objective": _num(cand.value), "decided": cand.decided},
        "baseline": None if base is None else {"objective": _num(base.value), "decided": base.decided},
        "objective": {k: _num(v) for k, v in c.objective.items()},
        "applied": c.space.values(c.applied),
        "knobs": list(c.space.knobs),
        "step_caps": dict(c.space.caps),
        "arm_step_factor": cfg.arm_step_factor,
        "trust_radius": round(c.local.radius, 4),
        "arms": {"robust": c.arms.robust is not None, "phases": sorted(c.arms.phases), "file": c.arms.path or None},
        "bandit": {n: round(c.bandit.mean(n), 4) for n in sorted(c.bandit.arms)},
        "trials": dict(c.counts["trials"]),
        "rollbacks": dict(c.counts["rollbacks"]),
        "phase_changes": c.counts["phase_changes"],
        "jumps": c.counts["jumps"],
        "requests_seen": c.m.arrivals_total,
        "exploration_fraction": round(c.explore_s / c.observed_s, 4) if c.observed_s > 0 else 0.0,
        "test": test_description(c),
        "window_s": cfg.window_s, "warmup_s": cfg.warmup_s, "min_requests": cfg.min_requests,
        "max_window_s": cfg.max_window_s, "window_now_s": round(c.trials.window_s, 1),
    }


def test_description(c: Controller) -> dict[str, Any]:
    cfg = c.cfg
    return {
        "design": f"switchback: {cfg.switch_slots} slots of {cfg.switch_s:g} s alternating candidate and incumbent "
                  f"(Thue-Morse order), the first {cfg.switch_warmup_s:g} s of each not counted",
        "accept": ("one-sided slot-level t-test (slots as units, cluster-robust variance, Welch df) of the "
                   if cfg.test_unit == "slot" else "one-sided two-proportion z-test (Wald, Kish effective n) of the ")
                  + "candidate's slots against the incumbent's: superiority for local steps; offline arms "
                  + (f"adopted unless significantly worse or more than {cfg.guard_margin} worse on the point estimate"
                     if cfg.arm_test == "unless_worse"
                     else f"non-inferiority within {cfg.noninferiority_margin}"),
        "arm_test": cfg.arm_test,
        "jump": (f"a phase's arm adopted without a trial when the study's gain over the incumbent's setting there "
                 f"is at least {cfg.jump_gain}" if cfg.jump_gain < 1 else "never: every arm is tried"),
        "unit": cfg.test_unit,
        "alpha": cfg.alpha, "min_requests": cfg.min_requests,
        "detectable_at_0.9": round(stats.detectable_delta(cfg.min_requests, 0.9, cfg.alpha), 4),
        "guard": f"any tenant worse by more than {cfg.guard_margin} at one-sided alpha {cfg.guard_alpha} "
                 f"(>= {cfg.guard_min_requests} decided requests of that tenant on each side)",
    }


def decision_dict(d: Decision, to_wall: Clock) -> dict[str, Any]:
    return d.as_dict(at=to_wall(d.t))


def dump(c: Controller, now: float, to_wall: Clock, profile_mode: str) -> dict[str, Any]:
    """What :func:`restore` reads back."""
    return {
        "version": STATE_VERSION,
        "mode": c.mode,
        "profile_mode": profile_mode,
        "frozen_by_operator": c.freeze.operator,
        "frozen_why": c.freeze.operator_why,
        "rollback_times": [round(to_wall(t), 3) for t in c.freeze.rollback_times],
        "exploration_charges": [[round(to_wall(t), 3), round(cost, 6)] for t, cost in c.budget.charges],
        "bandit": c.bandit.to_dict(),
        "trust_radius": c.local.radius,
        "incumbent": c.space.values(c.incumbent),
        "counts": {"trials": dict(c.counts["trials"]), "rollbacks": dict(c.counts["rollbacks"]),
                   "phase_changes": c.counts["phase_changes"], "jumps": c.counts["jumps"],
        "requests_seen": c.m.arrivals_total, "windows": c.counts["windows"]},
        "last_decisions": [decision_dict(d, to_wall) for d in list(c.decisions)[-20:]],
        "saved_at": round(to_wall(now), 3),
    }


def restore(c: Controller, data: Any, now: float, from_wall: Clock, profile_mode: str) -> list[str]:
    """Restore what :func:`dump` wrote; returns notes on what was (not) restored. Anything malformed is
    skipped, never fatal: the tuner then starts fresh."""
    notes: list[str] = []
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        return ["tuner state: not restored (missing or another version)"]
    mode = data.get("mode")
    if data.get("profile_mode") == profile_mode and mode in ("off", "shadow", "advise", "auto") and mode != c.mode:
        c.set_mode(mode, now)
        notes.append(f"mode {mode} restored (set through the API before the restart)")
    if data.get("frozen_by_operator") is True:
        c.set_freeze(True, now, str(data.get("frozen_why") or "restored from the last run"))
        notes.append("operator freeze restored")
    for t in data.get("rollback_times", []):
        if isinstance(t, (int, float)) and math.isfinite(t):
            c.freeze.rollback_times.append(from_wall(float(t)))
    for item in data.get("exploration_charges", []):
        if (isinstance(item, list) and len(item) == 2 and all(isinstance(x, (int, float)) for x in item)
                and all(math.isfinite(x) for x in item) and item[1] > 0):
            c.budget.charges.append((from_wall(float(item[0])), float(item[1])))
    if isinstance(data.get("bandit"), dict):
        c.bandit.load(data["bandit"])
    r = data.get("trust_radius")
    if isinstance(r, (int, float)) and c.local.min_radius <= r <= 1:
        c.local.radius = float(r)
    counts = data.get("counts")
    if isinstance(counts, dict):
        for key in ("trials", "rollbacks"):
            if isinstance(counts.get(key), dict):
                c.counts[key] = {str(k): int(v) for k, v in counts[key].items() if isinstance(v, int)}
        for key in ("phase_changes", "windows", "jumps"):
            if isinstance(counts.get(key), int):
                c.counts[key] = counts[key]
    for d in data.get("last_decisions", []):
        if isinstance(d, dict) and isinstance(d.get("at"), (int, float)):
            c.decisions.append(Decision(from_wall(float(d["at"])), str(d.get("action", "")), str(d.get("reason", "")),
                                        str(d.get("state", "")), str(d.get("mode", "")), d.get("phase"),
                                        d.get("params") if isinstance(d.get("params"), dict) else None))
    notes.append(f"tuner state restored ({len(c.freeze.rollback_times)} rollbacks in memory)")
    return notes
