"""``tbt_credit``: with it, ``lvf`` counts a parked request's lag from its mean-TBT deadline (the slack it
banked by its last token, at most its TTFT SLO), the clock the slack gate parked it by; ``lvf-paper`` and
``compute_vlt``'s default keep design §3.1's VLT."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.core import Params, compute_vlt, get_policy, ranking
from tests.core.builders import TENANTS, cap, rotary, snap, waiting

NOW = 100.0
S_F, S_B = 5.0, 0.1  # TENANTS' SLOs


def parked(req_id: int, outputs: int, since_first: float, gap: float) -> object:
    """Parked ``gap`` s ago after ``outputs`` tokens, the first ``since_first`` s before its last."""
    t_last = NOW - gap
    return rotary(req_id, t_arr=t_last - since_first - 1.0, t_last=t_last, outputs=outputs,
                  t_first=t_last - since_first)


def test_the_banked_slack_moves_the_deadline_later() -> None:
    # 40 tokens over 2.8 s against a 0.1 s mean-TBT budget: 39 * 0.1 - 2.8 = 1.1 s banked
    r = parked(1, outputs=40, since_first=2.8, gap=0.3)
    (plain,) = compute_vlt(snap(r), TENANTS, Params(alpha=3.0), NOW)
    (credited,) = compute_vlt(snap(r), TENANTS, Params(alpha=3.0), NOW, banked_tbt=True)
    assert plain == pytest.approx(3.0 * (0.3 - S_B))
    assert credited == pytest.approx(3.0 * (0.3 - 1.1 - S_B))


def test_the_credit_is_at_most_the_ttft_slo() -> None:
    r = parked(1, outputs=500, since_first=10.0, gap=0.3)  # 49.9 - 10 = 39.9 s banked, credited 5
    (credited,) = compute_vlt(snap(r), TENANTS, Params(alpha=1.0), NOW, banked_tbt=True)
    assert credited == pytest.approx(0.3 - S_F - S_B)


def test_a_stream_behind_its_mean_gets_no_credit_and_waiting_rows_are_untouched() -> None:
    behind = parked(1, outputs=10, since_first=3.0, gap=0.3)  # 0.9 - 3.0 < 0: nothing banked
    new = waiting(2, t_arr=NOW - 2.0)
    assert compute_vlt(snap(behind, new), TENANTS, Params(), NOW, banked_tbt=True).tolist() == \
        compute_vlt(snap(behind, new), TENANTS, Params(), NOW).tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2000), st.floats(0.0, 50.0), st.floats(0.0, 5.0), st.floats(0.0, 10.0))
def test_credit_only_ever_lowers_a_parked_requests_lag_by_at_most_alpha_s_f(outputs, since, gap, alpha) -> None:
    r = parked(1, outputs=outputs, since_first=since, gap=gap)
    (plain,) = compute_vlt(snap(r), TENANTS, Params(alpha=alpha), NOW)
    (credited,) = compute_vlt(snap(r), TENANTS, Params(alpha=alpha), NOW, banked_tbt=True)
    assert plain - alpha * S_F - 1e-9 <= credited <= plain + 1e-12


def _first(policy: str, params: Params) -> int:
    """The request ``policy`` ranks first between a stream well ahead of its SLO, parked 0.3 s ago, and a
    new request that can still meet its TTFT SLO (waiting 2 s of 5)."""
    s = snap(parked(1, outputs=200, since_first=10.0, gap=0.3), waiting(2, t_arr=NOW - 2.0))
    plan = get_policy(policy).plan(s, cap(free=0, hbm=64), params, TENANTS, NOW)
    ids, vlt = plan.vlt_ids, plan.vlt_values
    return int(ids[int(np.argmax(vlt))])


def test_lvf_with_credit_serves_the_new_request_first_and_without_it_the_parked_one() -> None:
    assert _first("lvf", Params(tbt_credit=1)) == 2
    assert _first("lvf", Params(tbt_credit=0)) == 1


@pytest.mark.parametrize("credit", [0, 1])
def test_the_exported_ranking_is_the_one_lvf_plans_by(credit: int) -> None:
    s = snap(parked(1, outputs=200, since_first=10.0, gap=0.3), waiting(2, t_arr=NOW - 2.0),
             parked(3, outputs=20, since_first=1.0, gap=0.5))
    params = Params(tbt_credit=credit)
    plan = get_policy("lvf").plan(s, cap(free=0, hbm=64), params, TENANTS, NOW)
    ids, vlt = ranking(s, TENANTS, params, NOW)
    plan_ids, plan_vlt = plan.ranking()
    assert ids.tolist() == plan_ids.tolist() and vlt.tolist() == pytest.approx(plan_vlt.tolist())
    order = ids.tolist()
    assert (order.index(2) < order.index(1)) == bool(credit)  # the credit puts the new request ahead


def test_lvf_paper_ignores_the_knob() -> None:
    assert _first("lvf-paper", Params(tbt_credit=1)) == _first("lvf-paper", Params(tbt_credit=0)) == 1
