"""SLO capacity read off a grid of rates: the first crossing of the target, interpolated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from superinfer.bench.twin.capacity import capacity_lines, capacity_ratios, slo_capacity


def rows(policy: str, curve: dict[float, float], variant: str = "") -> list[dict]:
    return [{"policy": policy, "rps": r, "variant": variant, "slo_attainment": {"mean": a, "ci95": (a, a)}}
            for r, a in curve.items()]


def test_the_crossing_is_interpolated_between_the_grid_rates_around_it() -> None:
    cap = slo_capacity(rows("lvf", {2.0: 1.0, 3.0: 0.95, 4.0: 0.85, 5.0: 0.6}))["lvf"]
    assert cap["rps"] == pytest.approx(3.5) and cap["grid_rps"] == 3.0 and not cap["at_least"]


def test_a_later_recovery_does_not_count() -> None:
    cap = slo_capacity(rows("vllm", {1.0: 0.95, 2.0: 0.8, 3.0: 0.92}))["vllm"]
    assert cap["grid_rps"] == 1.0 and 1.0 < cap["rps"] < 2.0


def test_below_the_grid_and_above_it_say_so() -> None:
    cap = slo_capacity(rows("a", {1.0: 0.5, 2.0: 0.4}) + rows("b", {1.0: 0.99, 2.0: 0.91}))
    assert cap["a"]["rps"] is None and cap["a"]["below"] == 1.0
    assert cap["b"]["rps"] == 2.0 and cap["b"]["at_least"]
    text = "\n".join(capacity_lines(cap))
    assert "below the grid (< 1 req/s)" in text and ">= 2 req/s" in text
    assert capacity_ratios(cap, "b", ["a"]) == {"a": None}


def test_variants_are_left_out_and_ratios_divide_capacities() -> None:
    cap = slo_capacity(rows("lvf", {1.0: 1.0, 2.0: 0.8}) + rows("lvf", {1.0: 0.1}, variant="x")
                       + rows("sarathi", {1.0: 0.9, 2.0: 0.7}))
    assert cap["lvf"]["rps"] == pytest.approx(1.5)
    assert capacity_ratios(cap, "lvf", ["sarathi"])["sarathi"] == pytest.approx(1.5)


def test_a_target_outside_a_share_is_refused() -> None:
    with pytest.raises(ValueError, match="target"):
        slo_capacity([], target=90)


@given(st.lists(st.floats(0, 1), min_size=2, max_size=8))
def test_the_capacity_lies_between_the_grid_rate_at_the_target_and_the_next(values: list[float]) -> None:
    curve = {float(i + 1): v for i, v in enumerate(values)}
    cap = slo_capacity(rows("p", curve))["p"]
    if cap["rps"] is None:
        assert values[0] < 0.9
    else:
        g = cap["grid_rps"]
        assert all(curve[r] >= 0.9 for r in curve if r <= g)
        assert g <= cap["rps"] <= (g + 1 if not cap["at_least"] else g)
