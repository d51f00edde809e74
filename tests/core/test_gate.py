"""The plan gate (``superinfer.core.gate``): when an engine may serve its batch without planning, and what
that step does.

* holding is the plan's own fast path: wherever the batch holds and the policy would only serve the batch,
  the hold plan is decision for decision the full plan;
* a hold plan serves every running decode with exactly its growth, and nothing else;
* the gate holds only after a plan that decided nothing, at the table version that plan saw, at most
  ``replan_steps - 1`` steps in a row; ``replan_steps = 1`` never holds;
* the table's version moves on every membership change and on nothing else;
* the twin holds under sustained overload and loses nothing.
"""

import numpy as np
import pytest
from hypothesis import given, settings

from superinfer.core import Phase, Plan, PlanGate, RequestTable, batch_holds, decided_nothing, get_policy
from superinfer.core.policies import POLICIES
from tests.core.builders import BS, cap, running, snap, waiting
from tests.core.test_nothing_to_plan import NOW, TENANTS, blocked_states

LVF = get_policy("lvf")


def holds(s, c) -> bool:
    return batch_holds(s, np.arange(len(s)), c.free_blocks, c.token_budget, c.block_size)


@settings(max_examples=400, deadline=None)
@given(blocked_states())
def test_where_the_batch_holds_and_only_the_batch_can_be_served_holding_is_the_plan(state) -> None:
    s, c, params = state
    if not holds(s, c):
        return
    for name, policy in POLICIES.items():
        hold = policy.hold(s, c, params, TENANTS, NOW)
        if policy.only_serves_batch(s, c, params, TENANTS, NOW):
            assert hold.decisions() == policy.plan(s, c, params, TENANTS, NOW).decisions(), name


@settings(max_examples=300, deadline=None)
@given(blocked_states())
def test_a_hold_plan_serves_every_running_decode_with_its_growth_and_nothing_else(state) -> None:
    s, c, params = state
    if not holds(s, c):
        return
    rr = np.flatnonzero(s.phase == Phase.RUNNING)
    p = LVF.hold(s, c, params, TENANTS, NOW)
    assert sorted(p.sched_ids.tolist()) == sorted(s.req_id[rr].tolist())
    assert np.all(p.sched_tokens == 1)
    assert p.victim_ids.shape[0] == p.swap_ids.shape[0] == p.sync_ids.shape[0] == 0
    assert int(p.alloc_blocks.sum()) <= c.free_blocks
    assert decided_nothing(p, rr.shape[0])


def test_the_batch_does_not_hold_where_a_decision_is_needed() -> None:
    decodes = [running(i, tokens=2 * BS, t_arr=NOW - 5) for i in range(3)]  # each grows into a new block
    assert holds(snap(*decodes), cap(3))
    assert not holds(snap(*decodes), cap(2)), "the growth does not fit: a victim is forced"
    assert not holds(snap(*decodes), cap(3, tokens=2)), "the decodes exceed the token budget"
    prefill = running(9, tokens=BS, prefill_left=5, t_arr=NOW)
    assert not holds(snap(*decodes, prefill), cap(30)), "a prefill chunk to size"
    assert not holds(snap(*decodes, running(9, tokens=BS - 1, busy=True)), cap(30)), "a copy in flight"
    assert not holds(snap(waiting(1, t_arr=NOW)), cap(30)), "nothing runs"
    assert holds(snap(*decodes, waiting(9, prompt=40 * BS, t_arr=NOW)), cap(3)), "a waiting request alone"


def _nothing() -> Plan:
    return Plan("lvf", sched_ids=np.array([1, 2]), sched_tokens=np.array([1, 1]))


def test_decided_nothing_means_no_decision_of_any_kind() -> None:
    assert decided_nothing(_nothing(), 2)
    assert not decided_nothing(_nothing(), 1), "an admission: more scheduled than were running"
    assert not decided_nothing(Plan("lvf", fcfs_fallback=True, sched_ids=np.array([1, 2])), 2)
    for kind in ("victim_ids", "swap_ids", "sync_ids"):
        p = _nothing()
        setattr(p, kind, np.array([3]))
        assert not decided_nothing(p, 2), kind


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_the_gate_holds_at_most_k_minus_1_steps_after_a_plan_that_decided_nothing(k: int) -> None:
    gate, run = PlanGate(), 0
    assert not gate.may_hold(0, k), "no plan yet"
    gate.planned(True, 7)
    for _ in range(3 * k):
        if not gate.may_hold(7, k):
            break
        gate.held()
        run += 1
    assert run == k - 1
    gate.planned(True, 7)
    assert gate.may_hold(7, k) == (k > 1), "a new plan restarts the count"


def test_the_gate_never_holds_after_a_decision_or_a_membership_change() -> None:
    gate = PlanGate()
    gate.planned(False, 3)
    assert not gate.may_hold(3, 64), "the last plan decided something"
    gate.planned(True, 3)
    assert gate.may_hold(3, 64)
    assert not gate.may_hold(4, 64), "a request arrived, left, parked or joined since"


def test_the_table_version_moves_on_membership_changes_only() -> None:
    t = RequestTable()
    v = t.version
    r = t.add("a", 0.0, 10)
    assert t.version == v + 1
    t.token_sampled(np.array([r]), 1.0)
    t.tick()
    t.joined(np.zeros(0, np.int64), 1.0, swapped_in=False)
    assert t.version == v + 1, "output tokens, an iteration, an empty join: the same requests in the same places"
    t.joined(r, 1.0, swapped_in=False)
    t.preempted(r, 10)
    t.remove("a")
    assert t.version == v + 4


def _twin(replan_steps: int) -> dict:
    from superinfer.core import Params, Tenant, TenantTable
    from superinfer.sim.run import RunSpec, run_one

    # reasoning traffic on a device held to 3,000 KV blocks: memory binds, requests wait and rotate
    return run_one(RunSpec(policy="lvf", rps=6.0, seed=0, workload="reasoning", duration_s=30.0, model="qwen2.5-32b",
                           hardware="gh200", tenants=TenantTable([Tenant("default", 10.0, 0.1, 1.0)]), dram_gib=400.0,
                           hbm_blocks=3000, drain_s=1200.0, params=Params(replan_steps=replan_steps)))


def test_the_twin_holds_under_overload_and_loses_nothing() -> None:
    held, every = _twin(4), _twin(1)
    assert every["held_steps"] == 0
    assert held["held_steps"] > 0.1 * held["iterations"]
    for run in (held, every):
        assert run["arrived"] == run["finished"] + run["rejected"] + run["shed"] > 0
