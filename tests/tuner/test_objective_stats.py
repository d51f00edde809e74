"""Window accounting (what counts, for which setting, when) and the tests behind decisions."""

from __future__ import annotations

import math

import pytest

from superinfer.tuner import stats
from superinfer.tuner.objective import Score, Window


def test_a_request_counts_once_finished_or_past_its_slo() -> None:
    w = Window(10.0, 20.0, "x")
    for _ in range(4):
        w.arrival("chat")
    w.first_token("chat", True)
    w.finished("chat", True, True)  # hit
    w.first_token("chat", False)  # a TTFT miss, decided at the first token
    w.finished("chat", False, True)  # ... and not counted again at its finish
    w.first_token("chat", True)  # TTFT met, still running: censored
    # the fourth has no first token: a miss once S_F has passed since the window's end, else censored
    s = w.score({"chat": 1.0}, {"chat": True})
    assert (s.value, s.decided) == (pytest.approx(1 / 3), 3)
    s = w.score({"chat": 1.0}, {"chat": False})
    assert (s.value, s.decided) == (0.5, 2)
    assert w.censored({"chat": True}) == 1 and w.censored({"chat": False}) == 2


def test_order_of_reports_does_not_matter() -> None:
    a, b = Window(0, 1, "a"), Window(0, 1, "b")
    a.arrival("t"), a.first_token("t", True), a.finished("t", True, False)
    b.finished("t", True, False), b.first_token("t", True), b.arrival("t")
    assert a.score({}).per_tenant == b.score({}).per_tenant == {"t": (0, 1)}


def test_tenant_weights_weigh_the_share() -> None:
    s = Score.of({"voice": (9, 10), "bulk": (1, 10)}, {"voice": 4.0, "bulk": 1.0})
    assert s.value == pytest.approx((4 * 9 + 1) / (4 * 10 + 10))
    assert s.n_eff == pytest.approx(50 ** 2 / (16 * 10 + 10))
    assert math.isnan(Score.of({}, {}).value)


def _score(p: float, n: int, tenant: str = "t") -> Score:
    return Score.of({tenant: (round(p * n), n)}, {})


def test_superiority_needs_a_significant_gain() -> None:
    assert stats.better(_score(0.95, 400), _score(0.85, 400), 0.05)[0]
    assert not stats.better(_score(0.87, 400), _score(0.85, 400), 0.05)[0]
    assert not stats.better(_score(1.0, 0), _score(0.5, 400), 0.05)[0]  # no data is no evidence


def test_non_inferiority_accepts_a_tie_and_refuses_a_clear_loss() -> None:
    assert stats.not_worse(_score(0.85, 400), _score(0.85, 400), 0.05, 0.05)[0]
    assert not stats.not_worse(_score(0.70, 400), _score(0.85, 400), 0.05, 0.05)[0]


def test_the_guard_names_the_tenant_that_lost() -> None:
    cand = Score.of({"chat": (90, 100), "voice": (10, 100)}, {})
    inc = Score.of({"chat": (90, 100), "voice": (90, 100)}, {})
    assert stats.guard_fires(cand, inc, 0.01, 0.05, 30)[0] == "voice"
    assert stats.guard_fires(cand, inc, 0.01, 0.05, 200)[0] is None  # too few requests to judge
    assert stats.guard_fires(inc, inc, 0.01, 0.05, 30)[0] is None


def test_sample_size_and_detectable_difference_agree() -> None:
    n = stats.required_requests(0.9, 0.05, 0.05)
    assert 400 < n < 600
    assert stats.detectable_delta(n, 0.9, 0.05) == pytest.approx(0.05, rel=0.01)
    with pytest.raises(ValueError):
        stats.required_requests(1.0, 0.05, 0.05)
