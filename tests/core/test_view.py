"""``ranking_rows``: the top of a plan's VLT ranking as ``/v1/state`` shows it, for the twin and the plugin alike."""

from __future__ import annotations

import pytest

from superinfer.core import Params, Tenant, TenantTable, get_policy
from superinfer.core.view import PHASE_NAMES, ranking_rows
from tests.core.builders import cap, rotary, running, snap, waiting

NOW = 100.0
TENANTS = TenantTable([Tenant("chat", 5.0, 0.1), Tenant("voice", 1.0, 0.05, 2.0)])
NAMES = ["chat", "voice"]


def planned():
    s = snap(waiting(1, t_arr=NOW - 7.0), rotary(2, t_arr=NOW - 20.0, t_last=NOW - 0.5, tenant=1, outputs=5),
             running(3, t_arr=NOW - 30.0, t_run=NOW - 2.0), waiting(4, t_arr=NOW - 1.0, tenant=1))
    return get_policy("lvf").plan(s, cap(free=0, hbm=64), Params(), TENANTS, NOW), s


def test_rows_follow_the_plans_ranking_with_the_phase_and_age_it_saw() -> None:
    plan, s = planned()
    rows = ranking_rows(plan, s, NOW, NAMES.__getitem__, 10)
    ids, vlt = plan.ranking()
    assert [r["req_id"] for r in rows] == ids.tolist() and [r["vlt_s"] for r in rows] == pytest.approx(vlt.tolist())
    by_id = {r["req_id"]: r for r in rows}
    assert by_id[2] == {"req_id": 2, "tenant": "voice", "phase": "rotary", "vlt_s": pytest.approx(by_id[2]["vlt_s"]),
                        "age_s": 20.0}
    assert by_id[3]["phase"] == "running" and by_id[1]["phase"] == "waiting" and by_id[1]["age_s"] == 7.0
    assert PHASE_NAMES == ("waiting", "rotary", "running")


def test_top_and_requests_that_left_are_skipped() -> None:
    plan, s = planned()
    ids = plan.ranking()[0].tolist()
    left = ids[0]
    rows = ranking_rows(plan, s, NOW, NAMES.__getitem__, 2, key=lambda rid: None if rid == left else f"req-{rid}")
    assert [r["req_id"] for r in rows] == [f"req-{i}" for i in ids[1:3]]
    assert ranking_rows(None, s, NOW, NAMES.__getitem__, 5) == [] and ranking_rows(plan, None, NOW, str, 5) == []
