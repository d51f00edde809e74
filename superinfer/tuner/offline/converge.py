"""When has an offline study converged? The running best and the stopping rule of ``bench tuner``'s
baselines (issue 30: "best value moving < 0.5 pp over its last 30 trials").

A study's *curve* is the best feasible value after each completed trial, in trial-number order (NaN
until the first feasible trial). It has converged after ``window`` trials that moved the best by less
than ``tol``: ``curve[-1] - curve[-1 - window] < tol``, which needs a feasible trial before the window
and at least ``min_trials`` trials (a study's sampler first draws ``startup`` trials at random: a best
that has not moved over those says nothing, so a study has ``startup + window``). The rule is the same for a whole study (its value) and for one phase
(the phase's score among trials feasible in that phase: the oracle's arm).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any


def running_best(values: Sequence[float | None], feasible: Sequence[bool]) -> list[float]:
    """The best feasible value after each trial (NaN before the first feasible one)."""
    out, best = [], -math.inf
    for v, ok in zip(values, feasible):
        if ok and v is not None and not math.isnan(v):
            best = max(best, float(v))
        out.append(best if best > -math.inf else math.nan)
    return out


def moved(curve: Sequence[float], window: int) -> float:
    """How much the best moved over the last ``window`` trials (NaN when the curve is too short or had no
    feasible trial before the window)."""
    if window < 1 or len(curve) <= window:
        return math.nan
    a, b = curve[-1 - window], curve[-1]
    return math.nan if math.isnan(a) or math.isnan(b) else b - a


def converged(curve: Sequence[float], window: int, tol: float, min_trials: int = 0) -> bool:
    m = moved(curve, window)
    return len(curve) >= min_trials and not math.isnan(m) and m < tol


def study_curve(study: Any) -> list[float]:
    """``running_best`` of an Optuna study's completed trials (feasible: ``constraint`` <= 0)."""
    import optuna

    done = sorted((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None),
                  key=lambda t: t.number)
    return running_best([t.value for t in done], [t.user_attrs.get("constraint", 0.0) <= 0 for t in done])


def stopper(window: int, tol: float, min_trials: int = 0) -> Callable[[Any, Any], None]:
    """An Optuna callback that stops ``optimize`` once the study has converged (every worker on a shared
    storage sees the same trials, so each stops by itself)."""

    def cb(study: Any, _trial: Any) -> None:
        if window > 0 and converged(study_curve(study), window, tol, min_trials):
            study.stop()

    return cb
