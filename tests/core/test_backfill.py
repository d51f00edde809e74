"""RotaSched v2's backfill: when the candidate LVF serves next cannot be made to fit, later candidates that
fit in the free blocks are admitted while the one passed over is still ahead of its SLO and the running
request a forced park would take next has the slack of a discretionary victim (``slack_gate_s``)."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings

from superinfer.core import Params, get_policy
from tests.core.builders import BS, TENANTS, rotary, running, state, waiting
from tests.core.test_properties import TENANTS as TWO_TENANTS
from tests.core.test_properties import NOW as P_NOW
from tests.core.test_properties import check_plan, states

NOW = 100.0
ON, OFF = Params(backfill=1), Params(backfill=0)


def blocked_by_a_parked_request(t_last: float, running_outputs: int = 50):
    """A parked request of 12 blocks ranks first (parked longest); 8 blocks are free; a short new prompt
    of 2 blocks waits behind it. The running request was loaded back an iteration ago, too recently to be a
    discretionary victim (``min_residency``); with 50 outputs in 1 s at a 0.1 s TBT budget it has banked
    3.9 s of slack (``slack_gate_s`` is 3 s)."""
    big = rotary(1, tokens=12 * BS - 1, t_arr=NOW - 4, t_last=t_last, outputs=50, t_first=NOW - 3)
    small = waiting(2, prompt=2 * BS - 1, t_arr=NOW - 0.01)
    fresh = running(3, tokens=4 * BS - 1, t_arr=NOW - 1.2, t_run=NOW - 0.5, outputs=running_outputs,
                    t_first=NOW - 1.0, residency=1)
    return state(big, small, fresh, free=8)


def admitted(p) -> set[int]:
    return set(p.sched_ids.tolist()) | set(p.swap_ids.tolist())


def test_a_short_request_is_admitted_past_a_parked_one_that_cannot_fit() -> None:
    s, c = blocked_by_a_parked_request(t_last=NOW - 1.0)  # 49 gaps of a 0.1 s budget in 3 s: 1.9 s ahead
    on, off = (get_policy("lvf").plan(s, c, p, TENANTS, NOW) for p in (ON, OFF))
    assert 1 not in admitted(on) and 1 not in admitted(off), "the parked request does not fit either way"
    assert 2 in admitted(on) and 2 not in admitted(off)
    assert on.victim_ids.shape[0] == off.victim_ids.shape[0] == 0, "backfill never preempts"


def test_no_backfill_once_the_request_passed_over_is_behind_its_slo() -> None:
    s, c = blocked_by_a_parked_request(t_last=NOW - 1.0)
    late = replace(TENANTS.tenants[0], tbt_slo=0.05)  # 49 gaps of 50 ms in 3 s: 0.55 s behind
    from superinfer.core import TenantTable

    p = get_policy("lvf").plan(s, c, ON, TenantTable([late]), NOW)
    assert 2 not in admitted(p), "it keeps the head of the line"


def test_no_backfill_while_the_next_forced_victim_cannot_afford_a_park() -> None:
    """The small request would grow into blocks the running one needs next; with 20 outputs in 1 s the
    running one has banked 0.9 s, less than ``slack_gate_s``, so nothing is backfilled; with the gate off
    (-3600) or lowered below its slack, it is."""
    s, c = blocked_by_a_parked_request(t_last=NOW - 1.0, running_outputs=20)
    assert 2 not in admitted(get_policy("lvf").plan(s, c, ON, TENANTS, NOW))
    for gate in (-3600.0, 0.5):
        assert 2 in admitted(get_policy("lvf").plan(s, c, replace(ON, slack_gate_s=gate), TENANTS, NOW))


def test_lvf_paper_never_backfills() -> None:
    s, c = blocked_by_a_parked_request(t_last=NOW - 1.0)
    p = get_policy("lvf-paper").plan(s, c, replace(ON, min_residency=10_000), TENANTS, NOW)
    assert 2 not in admitted(p)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_backfill_only_adds_admissions_that_fit(state) -> None:
    """Against the same state without backfill: the same victims and the same admissions, plus perhaps
    some more; and every invariant of a plan (capacity, budgets, tokens) still holds."""
    s, c, params = state
    on = get_policy("lvf").plan(s, c, replace(params, backfill=1), TWO_TENANTS, P_NOW)
    off = get_policy("lvf").plan(s, c, replace(params, backfill=0), TWO_TENANTS, P_NOW)
    check_plan("lvf", s, c, on)
    assert on.victim_ids.tolist() == off.victim_ids.tolist()
    assert admitted(on) >= admitted(off)
    same = {k: v for k, v in zip(off.sched_ids.tolist(), off.sched_tokens.tolist())}
    assert all(dict(zip(on.sched_ids.tolist(), on.sched_tokens.tolist())).get(k) == v for k, v in same.items())
