"""VLT is exactly design §3.1, and the ranking shows the knobs' qualitative effects."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.core import Params, Phase, Tenant, TenantTable, compute_vlt, ranking
from superinfer.core.types import Snapshot
from tests.core.builders import PARAMS, TENANTS, rotary, running, snap, waiting

NOW = 100.0


def vlt_of(*reqs, params=PARAMS, tenants=TENANTS, now=NOW):
    return compute_vlt(snap(*reqs), tenants, params, now)


def test_waiting_lags_by_age_minus_ttft_slo_and_delta_f():
    (v,) = vlt_of(waiting(1, t_arr=NOW - 7.0), params=Params(delta_f=0.5))
    assert v == pytest.approx(7.0 - 5.0 - 0.5)


def test_rotary_lags_by_alpha_times_gap_minus_tbt_slo_and_delta_b():
    (v,) = vlt_of(rotary(1, t_last=NOW - 0.4), params=Params(alpha=3.0, delta_b=0.05))
    assert v == pytest.approx(3.0 * (0.4 - 0.1 - 0.05))


def test_running_has_minus_its_time_in_the_batch():
    (v,) = vlt_of(running(1, t_run=NOW - 2.5))
    assert v == pytest.approx(-2.5)


def test_tenant_weight_multiplies_lag_and_divides_lead():
    tenants = TenantTable([Tenant("a", 5.0, 0.1, 1.0), Tenant("vip", 5.0, 0.1, 4.0)])
    behind, ahead = vlt_of(waiting(1, t_arr=NOW - 7.5, tenant=1), running(2, t_run=NOW - 2.0, tenant=1),
                           tenants=tenants)
    assert behind == pytest.approx(4.0 * (7.5 - 5.5))
    assert ahead == pytest.approx(-2.0 / 4.0)


def test_ties_go_to_the_earlier_arrival_then_the_smaller_id():
    reqs = [running(5, t_arr=2.0, t_run=NOW - 1), running(3, t_arr=1.0, t_run=NOW - 1),
            running(4, t_arr=1.0, t_run=NOW - 1)]
    ids, _ = ranking(snap(*reqs), TENANTS, PARAMS, NOW)
    assert ids.tolist() == [3, 4, 5]


def _rank_of(req_id, reqs, params):
    ids, _ = ranking(snap(*reqs), TENANTS, params, NOW)
    return ids.tolist().index(req_id)


MIX = [waiting(1, t_arr=NOW - 6.0), rotary(2, t_last=NOW - 0.12), running(3, t_run=NOW - 0.3)]


def test_larger_alpha_moves_rotary_requests_ahead():
    assert _rank_of(2, MIX, Params(alpha=0.5)) > _rank_of(2, MIX, Params(alpha=100.0))


def test_larger_delta_f_holds_waiting_requests_back():
    assert _rank_of(1, MIX, Params(delta_f=-1.0)) < _rank_of(1, MIX, Params(delta_f=2.0))


def test_larger_delta_b_delays_rotary_resumption():
    assert _rank_of(2, MIX, Params(delta_b=-0.5)) < _rank_of(2, MIX, Params(delta_b=0.5))


def test_vlt_is_vectorised_over_all_phases():
    reqs = [waiting(i, t_arr=NOW - i) for i in range(50)] + [running(100 + i, t_run=NOW - i) for i in range(50)]
    v = vlt_of(*reqs)
    assert v.shape == (100,)
    assert np.all(np.diff(v[:50]) > 0) and np.all(np.diff(v[50:]) < 0)


@st.composite
def vlt_cases(draw):
    tenants = TenantTable([Tenant(f"t{i}", draw(st.floats(0.01, 30)), draw(st.floats(0.01, 2)), draw(st.floats(1, 8)))
                           for i in range(draw(st.integers(1, 3)))])
    params = Params(alpha=draw(st.floats(0, 100)), delta_b=draw(st.floats(-10, 10)), delta_f=draw(st.floats(-60, 60)))
    n = draw(st.integers(0, 40))

    def column(values):
        return draw(st.lists(values, min_size=n, max_size=n))

    times = st.floats(0, NOW)
    cols = dict(req_id=list(range(n)), phase=column(st.integers(0, 2)), tenant=column(st.integers(0, len(tenants) - 1)),
                t_arr=column(times), t_last=column(times), t_run=column(times), num_tokens=[1] * n,
                num_computed=[0] * n, blocks_hbm=[0] * n)
    return Snapshot.from_columns(**cols), tenants, params


def vlt_by_row(s, tenants, params, r):
    """Design §3.1 for one row, in plain Python floats (the table in superinfer/core/vlt.py, in order)."""
    k = int(s.tenant[r])
    phase = int(s.phase[r])
    if phase == Phase.WAITING:
        v = (NOW - float(s.t_arr[r])) - (float(tenants.ttft_slo[k]) + params.delta_f)
    elif phase == Phase.ROTARY:
        v = ((NOW - float(s.t_last[r])) - (float(tenants.tbt_slo[k]) + params.delta_b)) * params.alpha
    else:
        v = ((NOW - float(s.t_run[r])) - 0.0) * -1.0
    w = float(tenants.weight[k])
    return v * (w if v > 0 else 1.0 / w)


@settings(max_examples=300, deadline=None)
@given(vlt_cases())
def test_vectorised_vlt_is_the_per_row_formula_bit_for_bit(case):
    s, tenants, params = case
    got = compute_vlt(s, tenants, params, NOW)
    assert [v.hex() for v in got.tolist()] == [vlt_by_row(s, tenants, params, r).hex() for r in range(len(s))]
