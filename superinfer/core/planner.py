"""One planning iteration, shared by every policy (design §3.2).

A policy is a :class:`~superinfer.core.orders.PolicySpec`: three orderings and a few switches.
:func:`build_plan` walks them in four short steps, each a function you can read top to bottom:

1. ``_continue_loads``: swap-ins already under way get host-to-device budget first.
2. ``_serve_running``: running requests get their decode token (or prefill chunk) in the policy's
   running order; when a request cannot grow, victims are *forced* from the policy's victim order.
3. ``admit`` (:mod:`superinfer.core.admission`): waiting and rotary requests in candidate order, while
   memory, tokens, sequences and the host-to-device budget allow. Only LVF may preempt here
   (*discretionary* victims), and never a request whose VLT is >= the candidate's; RotaSched v2 may
   backfill past a candidate that cannot be made to fit.
4. ``_eager_sync``: the device-to-host budget left after victims goes to copying full blocks early.

Invariants kept here (checked by the property tests):

* device blocks held after the plan <= ``hbm_blocks`` (every allocation is taken from ``free``, which
  victims replenish);
* host-to-device and device-to-host blocks issued <= ``b_xfer`` each;
* host blocks used by copies <= ``dram_free_blocks``;
* tokens <= ``token_budget``; resident sequences <= ``max_num_seqs`` (unless they already were);
* a victim's blocks are counted free in the same iteration: the engine must finish the victim's
  copy-out before compute writes those blocks (DuplexKV rule 2; vLLM's ``handle_preemptions``);
* the plan is a pure function of its inputs.

Cost (``superinferd bench sched``): the row sets are found once per plan (:class:`~superinfer.core.work.Work`), the victim order
is sorted once, candidates are sorted only as far as the walk goes, and the walk keeps its decisions in
Python lists that are written to the plan's arrays once.
"""

from __future__ import annotations

import numpy as np

from superinfer.core.admission import admit, slo_slack, swap_in_blocks
from superinfer.core.orders import Ctx, PolicySpec
from superinfer.core.types import Capacity, Plan, Snapshot
from superinfer.core.work import RUNNING, Work


def _continue_loads(ctx: Ctx, spec: PolicySpec, w: Work) -> None:
    s = ctx.snap
    if w.loading.shape[0] == 0:
        return
    for chunk in spec.candidate_order(ctx, w.loading):
        for r in chunk.tolist():
            if w.h2d == 0:
                return
            n = min(int(s.h2d_pending[r]), w.h2d)
            w.swap[r] = n
            w.h2d -= n


def _serve_running(ctx: Ctx, spec: PolicySpec, w: Work) -> None:
    s = ctx.snap
    rows = w.running
    if rows.shape[0] == 0:
        return
    to_compute = s.num_tokens[rows] - s.num_computed[rows]
    rows = rows[to_compute > 0]
    to_compute = to_compute[to_compute > 0]
    # Fast path: every running request is a decode, all fit in memory and tokens: no decisions to make.
    if np.all(to_compute == 1):
        need = (s.num_computed[rows] + 1 + w.bs - 1) // w.bs - s.blocks_hbm[rows]
        need = np.maximum(need, 0)
        if int(need.sum()) <= w.free and rows.shape[0] <= w.tokens:
            w.sched[rows] = 1
            w.alloc[rows] = need
            w.free -= int(need.sum())
            w.tokens -= int(rows.shape[0])
            return
    order = spec.running_order(ctx, rows)
    if spec.decodes_first:
        is_decode = (s.num_tokens[order] - s.num_computed[order]) == 1
        order = np.concatenate([order[is_decode], order[~is_decode]])
    victims = iter(spec.victim_order(ctx, rows).tolist())  # r itself is among them: never runs out
    for r in order.tolist():
        if w.victim[r]:
            continue
        remaining = int(s.num_tokens[r] - s.num_computed[r])
        tokens = 1 if remaining == 1 else min(remaining, w.tokens)
        if tokens <= 0 or w.tokens <= 0:
            break
        need = max(0, (int(s.num_computed[r]) + tokens + w.bs - 1) // w.bs - int(s.blocks_hbm[r]))
        while need > w.free:
            v = next(x for x in victims if not w.victim[x])
            w.preempt(v, save_tail=spec.save_tail)
            if v == r:  # the request itself was next in line: it waits, as in vLLM
                break
        if w.victim[r]:
            continue
        w.sched[r] = tokens
        w.alloc[r] = need
        w.free -= need
        w.tokens -= tokens


def _eager_sync(ctx: Ctx, spec: PolicySpec, w: Work) -> None:
    s = ctx.snap
    if not spec.eager_sync or w.d2h == 0 or w.dram == 0 or w.running.shape[0] == 0:
        return
    order = w.victim_order()  # likeliest victims first
    order = order[~w.victim[order]]
    want = _full_unsynced(s, order, w.bs)
    order, want = order[want > 0], want[want > 0]
    if order.shape[0] == 0:
        return
    budget = min(w.d2h, w.dram)
    before = np.concatenate(([0], np.cumsum(want)[:-1]))
    give = np.clip(budget - before, 0, want)
    w.sync[order] = give
    used = int(give.sum())
    w.d2h -= used
    w.dram -= used


def _full_unsynced(s: Snapshot, rows: np.ndarray, bs: int) -> np.ndarray:
    """Full device blocks of ``rows`` with no host copy, done or in flight (what eager sync copies; may be
    negative where a copy is ahead of the device, e.g. right after a swap-in)."""
    return np.minimum(s.num_computed[rows] // bs, s.blocks_hbm[rows]) - s.synced[rows] - s.syncing[rows]


def nothing_to_plan(snap: Snapshot, cap: Capacity) -> bool:
    """True when no policy has a decision to make this step, so an engine may skip planning and serve its
    batch as it stands: every live request is running (none waiting, parked or loading), the step's growth
    fits in the free blocks, and no running request holds a full block without a host copy (eager sync
    has nothing to copy). In that state every policy's plan is to schedule the running requests and do
    nothing else: no victim, admission, swap-in or sync (``tests/core/test_nothing_to_plan.py``)."""
    n = snap.phase.shape[0]
    if n == 0:
        return True
    if np.any(snap.phase != RUNNING) or np.any(snap.busy) or not fits_in_hbm(snap, cap):
        return False
    return not np.any(_full_unsynced(snap, np.arange(n), cap.block_size) > 0)


def only_serves_batch(ctx: Ctx, spec: PolicySpec, has_fallback: bool) -> bool:
    """True when requests wait but ``spec``'s plan can only serve the running batch as it stands: every
    running request decodes one token and its growth fits; no candidate (waiting or parked, holding no
    device blocks) fits in the blocks left, as the walk sizes it; no running request may be a discretionary
    victim; no full block awaits an eager sync; and the everything-fits fallback does not apply. Then the
    plan has no victim, admission, swap-in or sync (``tests/core/test_nothing_to_plan.py``), and an engine
    may serve the batch with the waiting queue held back, without planning."""
    s, cap, p = ctx.snap, ctx.cap, ctx.params
    running = s.phase == RUNNING
    if not running.any() or running.all() or np.any(s.busy) or np.any(s.h2d_pending > 0):
        return False
    rr, cand = np.flatnonzero(running), ~running
    if np.any(s.blocks_hbm[cand] > 0) or np.any(s.num_tokens[rr] - s.num_computed[rr] != 1):
        return False
    if rr.shape[0] > cap.token_budget:  # not every decode runs: the growth left unused may admit a swap-in
        return False
    if has_fallback and fits_in_hbm(s, cap):
        return False
    bs = cap.block_size
    free = cap.free_blocks - int(np.maximum((s.num_tokens[rr] + bs - 1) // bs - s.blocks_hbm[rr], 0).sum())
    if free < 0:
        return False
    if spec.eager_sync and cap.b_xfer > 0 and cap.dram_free_blocks > 0 and np.any(_full_unsynced(s, rr, bs) > 0):
        return False
    left = cap.token_budget - rr.shape[0]  # every running request takes its one decode token
    parked = s.blocks_dram[cand]
    computed = s.num_computed[cand]
    tokens = np.minimum(s.num_tokens[cand] - computed, max(left, 0))
    need = np.where(parked > 0, swap_in_blocks(parked, computed, bs), (computed + tokens + bs - 1) // bs)
    possible = (need <= free) & np.where(parked > 0, cap.b_xfer > 0, tokens > 0)
    if possible.any():
        return False
    if spec.discretionary:
        allowed = (s.residency[rr] >= p.min_residency) & (s.rotations[rr] < p.max_rotations)
        if spec.slo_guards:
            allowed &= slo_slack(ctx, rr) >= p.slack_gate_s
        if allowed.any():
            return False
    return True


def fits_in_hbm(snap: Snapshot, cap: Capacity) -> bool:
    """Design §3.2 step 0: every live request's blocks, grown by this step, fit in HBM."""
    need = (snap.num_tokens + cap.block_size - 1) // cap.block_size - snap.blocks_hbm
    return int(np.maximum(need, 0).sum()) <= cap.free_blocks


def build_plan(ctx: Ctx, spec: PolicySpec, *, hold: bool = False) -> Plan:
    """Run the four steps of one iteration for ``spec`` and package the result. ``hold``: steps 1 and 2
    only, the running batch served as it stands (:mod:`superinfer.core.gate`)."""
    token_budget = ctx.cap.token_budget
    if spec.token_cap is not None:
        token_budget = min(token_budget, spec.token_cap(ctx.params))
    w = Work(ctx, spec, token_budget)
    _continue_loads(ctx, spec, w)
    _serve_running(ctx, spec, w)
    if not hold:
        admit(ctx, spec, w)
        _eager_sync(ctx, spec, w)
    return _package(ctx, spec, w)


def _package(ctx: Ctx, spec: PolicySpec, w: Work) -> Plan:
    ids = ctx.snap.req_id
    # Only these rows can carry a decision; scanning them instead of every row keeps row order.
    touched = np.sort(np.concatenate((w.running, w.loading, w.admitted)))
    sched = touched[w.sched[touched] != 0]
    alloc = touched[w.alloc[touched] != 0]
    swap = touched[w.swap[touched] != 0]
    vict = touched[w.victim[touched]]
    sync = touched[w.sync[touched] != 0]
    return Plan(
        policy=spec.name,
        sched_ids=ids[sched], sched_tokens=w.sched[sched],
        alloc_ids=ids[alloc], alloc_blocks=w.alloc[alloc],
        swap_ids=ids[swap], swap_blocks=w.swap[swap],
        victim_ids=ids[vict], victim_d2h=w.victim_d2h[vict], victim_mode=w.victim_mode[vict],
        victim_forced=w.forced[vict],
        sync_ids=ids[sync], sync_blocks=w.sync[sync],
    )
