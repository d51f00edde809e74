"""When an offline study has converged (superinfer/tuner/offline/converge.py): the running best feasible
value, and the rule "the best moved less than tol over the last window trials, after the sampler's start"."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from superinfer.tuner.offline.converge import converged, moved, running_best

values = st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), min_size=1, max_size=60)


@given(values, st.data())
def test_the_running_best_never_falls_and_is_the_best_feasible_so_far(vals, data) -> None:
    feasible = data.draw(st.lists(st.booleans(), min_size=len(vals), max_size=len(vals)))
    curve = running_best(vals, feasible)
    assert len(curve) == len(vals)
    for i, c in enumerate(curve):
        seen = [v for v, ok in zip(vals[: i + 1], feasible[: i + 1]) if ok and v is not None]
        assert (math.isnan(c) and not seen) or c == max(seen)
    known = [c for c in curve if not math.isnan(c)]
    assert known == sorted(known)


def test_an_infeasible_better_value_does_not_count() -> None:
    assert running_best([0.5, 0.9, 0.6], [True, False, True]) == [0.5, 0.5, 0.6]


def test_converged_only_after_a_quiet_window_past_the_minimum() -> None:
    curve = [0.50, 0.60, 0.70, 0.702, 0.703, 0.704]
    assert moved(curve, 3) == 0.704 - 0.70
    assert converged(curve, 3, 0.005)  # moved 0.4 pp over the last 3 trials
    assert not converged(curve, 3, 0.005, min_trials=7)  # too few trials yet
    assert not converged(curve, 4, 0.005)  # 0.60 -> 0.704 over the last 4
    assert not converged(curve, 6, 0.005)  # the window is longer than the study
    assert not converged([math.nan] * 3 + [0.8, 0.8], 3, 0.005)  # nothing feasible before the window
