"""The search space's guarantees, as properties: never outside the core's bounds (``b_xfer``: the host's
measured budget), never a step larger than the cap, integers stay integers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.core import PARAM_BOUNDS
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.offline.study import B_XFER_SEARCH_MIN, SEARCH_RANGES
from superinfer.tuner.space import DEFAULT_KNOBS, TUNABLE_INTEGER, KnobSpace, SpaceError

B_MAX = 3173  # the GH200 twin's budget for Qwen2.5-32B (blocks of 16 per iteration, each way)
SPACE = KnobSpace(DEFAULT_KNOBS, b_xfer_max=B_MAX)
INTEGER_PARAMS = TUNABLE_INTEGER


def settings_in_bounds() -> st.SearchStrategy[dict]:
    parts = {}
    for k in DEFAULT_KNOBS:
        lo, hi = SPACE.bounds[k]
        parts[k] = (st.integers(int(lo), int(hi)).map(float) if k in INTEGER_PARAMS
                    else st.floats(lo, hi, allow_nan=False))
    return st.fixed_dictionaries(parts)


def study_range(k: str) -> tuple[float, float]:
    return (B_XFER_SEARCH_MIN, B_MAX) if k == "b_xfer" else SEARCH_RANGES[k]


ANY = st.floats(-1e7, 1e7, allow_nan=False)


def assert_valid(s: dict, start: dict, factor: float = 1.0) -> None:
    for k in DEFAULT_KNOBS:
        lo, hi = SPACE.bounds[k]
        assert lo <= s[k] <= hi, (k, s[k])
        if k in INTEGER_PARAMS:
            assert s[k] == int(s[k]), (k, s[k])
        assert abs(s[k] - start[k]) <= factor * SPACE.caps[k] + 1e-9, (k, start[k], s[k])


@settings(max_examples=150, deadline=None)
@given(start=settings_in_bounds(), target=st.fixed_dictionaries({k: ANY for k in DEFAULT_KNOBS}))
def test_toward_stays_in_bounds_and_caps(start: dict, target: dict) -> None:
    assert_valid(SPACE.toward(start, target), start)


@settings(max_examples=150, deadline=None)
@given(start=settings_in_bounds(), target=st.fixed_dictionaries({k: ANY for k in DEFAULT_KNOBS}),
       factor=st.floats(1.0, 10.0))
def test_toward_an_arm_moves_at_most_factor_caps(start: dict, target: dict, factor: float) -> None:
    assert_valid(SPACE.toward(start, target, factor), start, factor)


@settings(max_examples=100, deadline=None)
@given(target=st.fixed_dictionaries({k: st.floats(*study_range(k)) if k not in INTEGER_PARAMS
                                     else st.integers(int(study_range(k)[0]), int(study_range(k)[1])).map(float)
                                     for k in DEFAULT_KNOBS}))
def test_any_study_arm_is_reached_from_the_defaults_in_two_decisions(target: dict) -> None:
    """docs/tuner.md's claim for the default arm_step_factor (3): every setting a study can propose
    (inside SEARCH_RANGES) is at most two capped decisions from the core's defaults."""
    factor = TunerConfig().arm_step_factor
    s = dict(SPACE.defaults)
    for _ in range(2):
        s = SPACE.toward(s, target, factor)
    assert SPACE.same(s, target, tol=1e-6), {k: (s[k], target[k]) for k in DEFAULT_KNOBS}


def test_one_cap_does_not_reach_every_study_arm_in_two_decisions() -> None:
    """The previous claim fails without the factor (so the test above can fail): delta_f from 0.5 to -4.8."""
    s = dict(SPACE.defaults)
    target = {**s, "delta_f": -4.8}
    for _ in range(2):
        s = SPACE.toward(s, target)
    assert not SPACE.same(s, target)


@settings(max_examples=150, deadline=None)
@given(start=settings_in_bounds(), u=st.fixed_dictionaries({k: ANY for k in DEFAULT_KNOBS}),
       radius=st.floats(0.01, 1.0))
def test_local_stays_in_bounds_and_caps(start: dict, u: dict, radius: float) -> None:
    assert_valid(SPACE.local(start, u, radius), start)


SWITCHES = [k for k in DEFAULT_KNOBS if k in INTEGER_PARAMS and SPACE.bounds[k] == (0, 1)]


@pytest.mark.parametrize("radius", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("knob", SWITCHES)
def test_a_local_step_can_flip_a_switch_at_any_radius(knob: str, radius: float) -> None:
    """A 0/1 knob flips when ``|u| >= 1 / (radius + 1)``, and only then (rounding ``u * radius`` never
    flipped one at the starting radius 0.5)."""
    assert len(SWITCHES) == 3  # hopeless_last, backfill, tbt_credit
    at = 1.0 / (radius + 1.0)
    for start, sign in ((0.0, 1.0), (1.0, -1.0)):
        s = SPACE.clip({knob: start})
        assert SPACE.local(s, {knob: sign * 1.0}, radius)[knob] == 1.0 - start
        assert SPACE.local(s, {knob: sign * (at + 1e-9)}, radius)[knob] == 1.0 - start
        assert SPACE.local(s, {knob: sign * (at - 1e-6)}, radius)[knob] == start
        assert SPACE.local(s, {knob: -sign}, radius)[knob] == start  # past the bound: stays


def test_the_online_local_search_tries_the_switches_from_its_first_steps() -> None:
    """The tuner's own local search (Optuna TPE, its random start-up steps at radius 0.5) proposes steps
    that flip the switches from the defaults: before, none of its steps ever did."""
    from superinfer.tuner.local import LocalSearch

    start = SPACE.clip({})
    flipped = {k: 0 for k in SWITCHES}
    for seed in range(10):
        search = LocalSearch(SPACE, seed=seed)
        for _ in range(4):
            _, cand = search.ask(start)
            for k in SWITCHES:
                flipped[k] += cand[k] != start[k]
    assert all(n > 0 for n in flipped.values()), flipped


@settings(max_examples=100, deadline=None)
@given(s=st.fixed_dictionaries({k: ANY for k in DEFAULT_KNOBS}))
def test_clip_is_within_bounds_and_idempotent(s: dict) -> None:
    c = SPACE.clip(s)
    assert SPACE.check(c) == c and SPACE.clip(c) == c


def test_toward_reaches_a_near_target_and_caps_a_far_one() -> None:
    start = {k: 0.0 for k in DEFAULT_KNOBS} | {"step_slo_share": 0.8, "hopeless_last": 1.0, "b_xfer": 100.0}
    near = SPACE.toward(start, {"step_slo_share": 1.5})
    assert near["step_slo_share"] == pytest.approx(1.5)
    far = SPACE.toward(start, {"step_slo_share": 9.0, "hopeless_last": 0})
    assert far["step_slo_share"] == pytest.approx(0.8 + SPACE.caps["step_slo_share"]) and far["hopeless_last"] == 0
    assert far["alpha"] == start["alpha"]  # knobs the target does not name stay


def test_check_refuses_what_it_would_otherwise_clip() -> None:
    good = SPACE.clip({})
    with pytest.raises(SpaceError, match="alpha = 1000.0 is outside"):
        SPACE.check({**good, "alpha": 1000.0})
    with pytest.raises(SpaceError, match="min_residency must be an integer"):
        SPACE.check({**good, "min_residency": 2.5})
    with pytest.raises(SpaceError, match="knob 'delta_f' is missing"):
        SPACE.check({k: v for k, v in good.items() if k != "delta_f"})
    with pytest.raises(SpaceError, match="finite"):
        SPACE.check({**good, "alpha": math.inf})


def test_bad_spaces_are_refused_with_the_knob_named() -> None:
    with pytest.raises(SpaceError, match="unknown knob"):
        KnobSpace(["alpha", "speed"])
    with pytest.raises(SpaceError, match="step_caps.alpha"):
        KnobSpace(["alpha"], {"alpha": 0})
    with pytest.raises(SpaceError, match="integer knob needs a cap >= 1"):
        KnobSpace(["min_residency"], {"min_residency": 0.5})
    with pytest.raises(SpaceError, match="at least one knob"):
        KnobSpace([])
    with pytest.raises(SpaceError, match="factor"):
        SPACE.toward(SPACE.clip({}), {}, 0.5)


def test_every_knob_of_the_core_can_be_tuned() -> None:
    """Any knob ``[tuner] knobs`` accepts (the core's PARAM_BOUNDS) has a default step cap and a study
    search range (``backfill`` had neither: listing it crashed with a KeyError)."""
    space = KnobSpace(tuple(PARAM_BOUNDS))
    assert set(space.caps) == set(PARAM_BOUNDS) == set(SEARCH_RANGES)
    s = space.toward(space.clip({}), {"backfill": 0})
    assert s["backfill"] == 0.0 and space.values(s)["backfill"] == 0


def test_b_xfer_is_bounded_by_the_measured_budget_and_moves_a_quarter_of_it() -> None:
    """The tuner may lower the transfer budget, never raise it past what the link was measured to carry;
    one decision moves it by at most a quarter of that budget."""
    assert SPACE.bounds["b_xfer"] == (0.0, float(B_MAX)) and SPACE.defaults["b_xfer"] == B_MAX
    assert SPACE.caps["b_xfer"] == B_MAX // 4
    assert SPACE.clip({"b_xfer": 10**6})["b_xfer"] == B_MAX
    with pytest.raises(SpaceError, match="b_xfer = 3174.0 is outside"):
        SPACE.check({**SPACE.clip({}), "b_xfer": B_MAX + 1})
    down = SPACE.toward(SPACE.clip({}), {"b_xfer": 16})
    assert down["b_xfer"] == B_MAX - B_MAX // 4 and SPACE.values(down)["b_xfer"] == B_MAX - B_MAX // 4
    assert KnobSpace(["b_xfer"], {"b_xfer": 100}, b_xfer_max=B_MAX).caps["b_xfer"] == 100


def test_b_xfer_is_not_tuned_where_no_budget_is_known() -> None:
    """No host tier (budget 0) or no measurement: b_xfer leaves the tuned knobs, the rest stay."""
    for b in (None, 0):
        space = KnobSpace(DEFAULT_KNOBS, b_xfer_max=b)
        assert "b_xfer" not in space.knobs and space.dropped == ("b_xfer",)
        assert set(space.knobs) == set(DEFAULT_KNOBS) - {"b_xfer"}
    with pytest.raises(SpaceError, match="at least one knob"):
        KnobSpace(["b_xfer"])
    for bad in (-1, 2.5, True, 10**7):
        with pytest.raises(SpaceError, match="b_xfer_max"):
            KnobSpace(DEFAULT_KNOBS, b_xfer_max=bad)
