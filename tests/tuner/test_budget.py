"""The exploration budget: local steps stop while their realised losses of the last hour exceed
``explore_budget`` of the hour; the arms file's settings are still tried; the charges survive a restart."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.tuner.budget import HOUR_S, ExplorationBudget
from superinfer.tuner.snapshot import dump, restore, status
from tests.tuner.world import START, World, make

charges = st.lists(st.tuples(st.floats(0, 5000), st.floats(0, 1), st.floats(0, 1), st.floats(0, 600)),
                   max_size=40)


@settings(max_examples=200, deadline=None)
@given(charges, st.floats(0, 1))
def test_spent_is_the_sum_of_non_negative_charges_of_the_last_hour(items, share: float) -> None:
    b = ExplorationBudget(share)
    t, log = 0.0, []
    for dt, base, served, dur in items:
        t += dt
        c = b.charge(t, base, served, dur)
        assert c == pytest.approx(max(0.0, base - served) * dur) and c >= 0
        log.append((t, c))
        expected = sum(x for s, x in log if s > t - HOUR_S)
        assert b.spent(t) == pytest.approx(expected)
        assert b.allows(t) == (share > 0 and expected < share * HOUR_S)


def test_missing_scores_charge_nothing_and_bad_shares_are_refused() -> None:
    b = ExplorationBudget(0.01)
    assert b.charge(1.0, None, 0.5, 100) == 0 and b.charge(1.0, 0.9, math.nan, 100) == 0 and b.spent(1.0) == 0
    for bad in (-0.1, 1.5, True, "0.01"):
        with pytest.raises(ValueError, match="explore_budget"):
            ExplorationBudget(bad)  # type: ignore[arg-type]


def _local_trials(ctl) -> list[float]:
    return [d.t for d in ctl.decisions if d.action == "trial" and d.reason.startswith("local")]


def steep(params: dict, phase: str) -> float:
    """The start is the best setting and every step away from it loses: 3 points per 0.01 of share (a
    queue near capacity)."""
    return max(0.02, 0.95 - 3.0 * abs(params["step_slo_share"] - START["step_slo_share"]))


def _run_two_hours(budget: float):
    world = World(steep, rate=20.0)
    # rollbacks never freeze it here and no futility look cuts a step short: the budget alone must stop
    # the exploration (with the look each losing step costs half as much, so more of them fit the hour)
    ctl = make(world, explore_threshold=0.0, explore_budget=budget, max_rollbacks_per_hour=1000,
               futility_margin=1.0)
    ctl.decisions = type(ctl.decisions)(maxlen=10_000)
    world.run(ctl, 0.0, 2 * HOUR_S)
    return ctl


def test_losing_local_steps_stop_once_the_hour_s_budget_is_spent() -> None:
    free, budgeted = _run_two_hours(1.0), _run_two_hours(0.01)
    n_free, n_budgeted = len(_local_trials(free)), len(_local_trials(budgeted))
    assert n_free >= 30, n_free
    assert 1 <= n_budgeted <= n_free // 3, (n_budgeted, n_free)
    # a local step starts only while the losses of the last hour are within the allowance
    starts = _local_trials(budgeted)
    charged = list(budgeted.budget.charges)
    assert charged and all(c > 0 for _, c in charged)
    for t in starts:
        before = sum(c for s, c in charged if t - HOUR_S < s <= t)
        assert before < budgeted.budget.allowance
    holds = [d for d in budgeted.decisions if d.action == "hold" and "no local step" in d.reason]
    assert holds and "attainment-seconds" in holds[0].reason


def test_a_zero_budget_tries_no_local_step_and_says_why() -> None:
    ctl = _run_two_hours(0.0)
    assert _local_trials(ctl) == []
    assert any(d.action == "hold" and "no local step" in d.reason for d in ctl.decisions)
    assert status(ctl, 2 * HOUR_S)["exploration_budget"]["local_steps_allowed"] is False


def test_the_charges_survive_a_restart() -> None:
    ctl = _run_two_hours(0.01)
    now = 2 * HOUR_S
    spent = ctl.budget.spent(now)
    assert spent > 0
    data = dump(ctl, now, lambda t: t + 1e9, "auto")
    fresh = make(World(steep), explore_budget=0.01)
    restore(fresh, data, now, lambda w: w - 1e9, "auto")
    assert fresh.budget.spent(now) == pytest.approx(spent, abs=1e-3)
    assert status(fresh, now)["exploration_budget"]["spent_last_hour"] == pytest.approx(spent, abs=1e-2)
