"""The tuner's replay sheds as the twin's own run loop and the daemon do: requests still without a first token
at their tenant's deadline (``max_queue_s``), and, with ``shed_at_admission``, those refused at the door.
Without that, ``bench tuner --profile`` and ``superinferd tune`` judged a profile with deadlines on a queue
the daemon never holds (thousands waiting after an hour of the ``reasoning`` profile at 3 req/s)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from superinfer.core import Tenant, TenantTable
from superinfer.sim.build import build_cost_model
from superinfer.sim.engine import SimConfig, Simulator
from superinfer.sim.metrics import run_metrics
from superinfer.sim.workload import load_workload
from superinfer.tuner.offline.replay import replay


def table(max_queue_s: float) -> TenantTable:
    return TenantTable([Tenant("default", ttft_slo=10.0, tbt_slo=0.1, max_queue_s=max_queue_s)])


def overload():
    """Reasoning traffic well past what the GH200 twin sustains: a queue builds within a minute."""
    return load_workload("reasoning", rps=6.0, duration_s=90, seed=1, tenants={"default": 1.0})


def both(max_queue_s: float, at_admission: bool = False):
    w = overload()
    cm = build_cost_model("qwen2.5-32b", "gh200", 16)
    cfg = SimConfig(policy="lvf", tenants=table(max_queue_s), drain_s=60.0, seed=0, shed_at_admission=at_admission)
    return w, Simulator(w, cm, cfg).run(), replay(w, cm, cfg).trace


@pytest.mark.parametrize("at_admission", [False, True])
def test_the_replay_sheds_the_requests_the_run_loop_sheds(at_admission: bool) -> None:
    w, run, rep = both(20.0, at_admission)
    shed_run, shed_rep = ~np.isnan(run.t_shed), ~np.isnan(rep.t_shed)
    assert shed_run.sum() > 0  # the deadline binds on this traffic
    assert (rep.counters["shed_predicted"] > 0) == at_admission  # and the door refuses with the predictor on
    np.testing.assert_array_equal(shed_rep, shed_run)
    np.testing.assert_allclose(rep.t_shed[shed_rep], run.t_shed[shed_run])
    m_run, m_rep = (run_metrics(t, table(20.0), w.duration_s) for t in (run, rep))
    for k in ("slo_attainment", "ttft_attainment", "shed", "finished", "rotations"):
        assert m_rep[k] == m_run[k], k


def test_a_shed_request_waited_its_deadline_and_never_got_a_first_token() -> None:
    _, _, rep = both(20.0)
    shed = ~np.isnan(rep.t_shed)
    assert np.all(np.isnan(rep.t_first[shed]))
    assert np.all(rep.t_shed[shed] - rep.t_arr[shed] >= 20.0)


def test_no_deadline_sheds_nothing() -> None:
    _, run, rep = both(math.inf)
    assert not np.any(~np.isnan(rep.t_shed)) and not np.any(~np.isnan(run.t_shed))
