"""VLT is exactly design §3.1, and the ranking shows the knobs' qualitative effects."""

import numpy as np
import pytest

from superinfer.core import Params, Tenant, TenantTable, compute_vlt, ranking
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
