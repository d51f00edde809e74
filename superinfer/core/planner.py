"""One planning iteration, shared by every policy (design §3.2).

A policy is a :class:`~superinfer.core.orders.PolicySpec`: three orderings and a few switches.
:func:`build_plan` walks them in four short steps, each a function you can read top to bottom:

1. ``_continue_loads``: swap-ins already under way get host-to-device budget first.
2. ``_serve_running``: running requests get their decode token (or prefill chunk) in the policy's
   running order; when a request cannot grow, victims are *forced* from the policy's victim order.
3. ``_admit``: waiting and rotary requests in candidate order, while memory, tokens, sequences and the
   host-to-device budget allow. Only LVF may preempt here (*discretionary* victims), and never a request
   whose VLT is >= the candidate's.
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

Cost (``superinferd bench sched``): the row sets are found once per plan (``_Work``), the victim order
is sorted once, candidates are sorted only as far as the walk goes, and the walk keeps its decisions in
Python lists that are written to the plan's arrays once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from superinfer.core.orders import Ctx, PolicySpec
from superinfer.core.types import Capacity, Phase, Plan, Snapshot, VictimMode

_NEG_INF = float("-inf")
_RUNNING = int(Phase.RUNNING)  # a plain int: comparing an array with an IntEnum member is several times slower
_SWAP = int(VictimMode.SWAP)
_RECOMPUTE = int(VictimMode.RECOMPUTE)


class _Work:
    """The mutable ledger of one plan; rows are snapshot rows."""

    def __init__(self, ctx: Ctx, spec: PolicySpec, token_budget: int) -> None:
        snap, cap = ctx.snap, ctx.cap
        n = len(snap)
        self.ctx, self.spec, self.snap = ctx, spec, snap
        self.bs = cap.block_size
        self.free = cap.free_blocks
        self.tokens = token_budget
        self.h2d = cap.b_xfer
        self.d2h = cap.b_xfer
        self.dram = cap.dram_free_blocks
        # The row sets every step works on, computed once (each is one pass over all rows).
        running = snap.phase == _RUNNING
        idle = ~snap.busy
        loading = snap.h2d_pending > 0
        held = snap.blocks_hbm > 0
        self.running = np.flatnonzero(running & ~loading & idle)  # servable and preemptible
        self.loading = np.flatnonzero(loading & idle)  # swap-ins under way
        self.is_cand = ~(running | held) & idle  # waiting and parked: no device blocks
        self.cands = np.flatnonzero(self.is_cand)
        self.seqs = int(np.count_nonzero(running | held))
        self.max_seqs = cap.max_num_seqs
        self.admitted = np.zeros(0, np.int64)
        self.sched = np.zeros(n, np.int64)
        self.alloc = np.zeros(n, np.int64)
        self.swap = np.zeros(n, np.int64)
        self.victim = np.zeros(n, np.bool_)
        self.victim_d2h = np.zeros(n, np.int64)
        self.victim_mode = np.zeros(n, np.int8)
        self.forced = np.zeros(n, np.bool_)
        self.sync = np.zeros(n, np.int64)
        self._victim_order: np.ndarray | None = None

    def victim_order(self) -> np.ndarray:
        """Every servable running row, first victim first; sorted once per plan (subsets filter it)."""
        if self._victim_order is None:
            self._victim_order = self.spec.victim_order(self.ctx, self.running)
        return self._victim_order

    def preempt(self, r: int, *, save_tail: bool) -> None:
        """Make ``r`` a forced victim: return what it was given, free its blocks, copy out what fits of
        its unsynced blocks (device blocks holding KV with no host copy, finished or in flight)."""
        s = self.snap
        self.tokens += int(self.sched[r])
        self.free += int(self.alloc[r]) + int(s.blocks_hbm[r])
        self.sched[r] = self.alloc[r] = 0
        self.seqs -= 1
        data = (int(s.num_computed[r]) + self.bs - 1) // self.bs
        unsynced = max(0, min(data, int(s.blocks_hbm[r])) - int(s.synced[r]) - int(s.syncing[r]))
        copy = min(unsynced, self.d2h, self.dram) if save_tail else 0
        self.d2h -= copy
        self.dram -= copy
        self.victim[r] = self.forced[r] = True
        self.victim_d2h[r] = copy
        self.victim_mode[r] = _SWAP if copy == unsynced else _RECOMPUTE


def _continue_loads(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
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


def _serve_running(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
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


class _VictimTail:
    """LVF's discretionary victims: running requests from the tail of L (ascending VLT).

    Built on the first candidate that needs room. The columns the walk looks at are copied to Python
    lists once, so each look costs no numpy scalar access; the victims taken are written to the plan's
    arrays once, by :meth:`commit`. Rows passed over (guarded, already a forced victim, or with a tail
    that does not fit what is left of the budget) can never qualify later in the walk: budgets only
    shrink and later candidates rank lower.
    """

    def __init__(self, ctx: Ctx, w: _Work) -> None:
        s, p = ctx.snap, ctx.params
        rows = w.victim_order()
        blocks = s.blocks_hbm[rows]
        data = (s.num_computed[rows] + w.bs - 1) // w.bs
        unsynced = np.maximum(np.minimum(data, blocks) - s.synced[rows] - s.syncing[rows], 0)
        allowed = (s.residency[rows] >= p.min_residency) & (s.rotations[rows] < p.max_rotations) & ~w.victim[rows]
        if w.spec.slo_guards:
            allowed &= slo_slack(ctx, rows) >= p.slack_gate_s
        self.margin = p.rotation_margin_s if w.spec.slo_guards else 0.0
        self.rows, self.copy = rows, unsynced
        self.vlt = ctx.vlt[rows].tolist()
        self.allowed = allowed.tolist()
        self.unsynced = unsynced.tolist()
        self.freed = (blocks + w.alloc[rows]).tolist()  # its blocks and this step's growth
        self.tokens = w.sched[rows].tolist()  # this step's tokens, handed back
        self.pos = 0
        self.taken: list[int] = []  # positions in ``rows`` of the victims taken so far

    def take(self, w: _Work, need: int, vlt_c: float) -> bool:
        """Preempt victims that free ``need`` blocks, all ranked below ``vlt_c``; False (and nothing
        preempted) if that is impossible. Each victim copies its whole unsynced tail out."""
        chosen: list[int] = []
        freed = copied = 0
        room = min(w.d2h, w.dram)  # for the victims' unsynced tails
        pos, n = self.pos, len(self.vlt)
        bar = vlt_c - self.margin  # a victim must rank below the candidate by more than the margin
        while pos < n and freed < need:
            if self.vlt[pos] >= bar:
                break  # ascending: no later row qualifies either
            k = pos
            pos += 1
            unsynced = self.unsynced[k]
            if not self.allowed[k] or copied + unsynced > room:
                continue  # guarded; or a discretionary rotation would drop KV, which it never does
            copied += unsynced
            freed += self.freed[k]
            chosen.append(k)
        self.pos = pos
        if freed < need:
            return False
        w.free += freed
        w.tokens += sum(self.tokens[k] for k in chosen)
        w.seqs -= len(chosen)
        w.d2h -= copied
        w.dram -= copied
        self.taken.extend(chosen)
        return True

    def commit(self, w: _Work) -> None:
        """Write the victims taken into the plan's arrays."""
        rows = self.rows[self.taken]
        w.victim[rows] = True
        w.victim_d2h[rows] = self.copy[self.taken]
        w.victim_mode[rows] = _SWAP
        w.sched[rows] = w.alloc[rows] = 0


def slo_slack(ctx: Ctx, rows: np.ndarray) -> np.ndarray:
    """Seconds each of ``rows`` is ahead of its SLO (negative: behind). After k >= 1 output tokens the
    TBT budget spent so far: ``S_B·(k−1) − (now − t_first)``; before the first, the TTFT headroom
    ``S_F − (now − t_arr)``. Parking a request costs it about the park time of this slack."""
    s, t = ctx.snap, ctx.tenants
    k = s.outputs[rows]
    ten = s.tenant[rows]
    tbt = t.tbt_slo[ten] * (k - 1) - (ctx.now - s.t_first[rows])
    ttft = t.ttft_slo[ten] - (ctx.now - s.t_arr[rows])
    return np.where(k > 0, tbt, ttft)


def _candidates(ctx: Ctx, spec: PolicySpec, rows: np.ndarray) -> Iterator[tuple[int, float, int, int, int]]:
    """(row, VLT, blocks parked in DRAM, computed tokens, tokens to compute) of each of ``rows`` in the
    policy's candidate order; the columns are read once per chunk of the stream. VLT is -inf for a
    policy that does not rank by it."""
    s, vlt = ctx.snap, ctx.vlt
    for chunk in spec.candidate_order(ctx, rows):
        ranks = vlt[chunk].tolist() if vlt is not None else [_NEG_INF] * chunk.shape[0]
        computed = s.num_computed[chunk]
        yield from zip(chunk.tolist(), ranks, s.blocks_dram[chunk].tolist(), computed.tolist(),
                       (s.num_tokens[chunk] - computed).tolist())


class _Walk:
    """Admission: walks candidates in the policy's order and admits each while memory, tokens,
    sequences and the host-to-device budget allow (a candidate parked in DRAM is a swap-in: it needs
    the link and no tokens; any other needs tokens and no link). Only LVF preempts running requests to
    make room, and never admits a request ranked at or below one preempted this iteration."""

    def __init__(self, ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
        self.ctx, self.spec, self.w = ctx, spec, w
        forced = w.running[w.victim[w.running]]
        self.ranked = ctx.vlt is not None
        self.floor = float(ctx.vlt[forced].max()) if (self.ranked and forced.shape[0]) else _NEG_INF
        self.tail: _VictimTail | None = None
        self.admitted: list[tuple[int, int, int, int]] = []  # (row, blocks, tokens, host-to-device blocks)

    def run(self, rows: np.ndarray) -> str | None:
        """Walk ``rows``; returns ``"link"`` or ``"tokens"`` if it stopped at a candidate that needs a
        budget that is spent, else None."""
        spec, w, hopeless = self.spec, self.w, self.ctx.hopeless
        for c, vlt_c, dram, computed, todo in _candidates(self.ctx, spec, rows):
            if w.seqs >= w.max_seqs or (self.ranked and vlt_c <= self.floor):
                return None
            if dram > 0:  # a swap-in: reserve all its blocks, copy what the link allows now
                if w.h2d == 0:
                    return "link"
                tokens, need, h2d = 0, dram, min(dram, w.h2d)
            else:  # a candidate holds no device blocks: it needs blocks for what it computes now
                tokens = min(todo, w.tokens)
                if tokens <= 0:
                    return "tokens"
                need, h2d = (computed + tokens + w.bs - 1) // w.bs, 0
            if need > w.free:
                if not spec.discretionary or (hopeless is not None and hopeless[c]):
                    return None  # a request past its TTFT SLO takes only free room
                self.tail = self.tail or _VictimTail(self.ctx, w)
                if not self.tail.take(w, need - w.free, vlt_c):
                    return None
                self.floor = max(self.floor, self.tail.vlt[self.tail.taken[-1]])
            w.free -= need
            w.tokens -= tokens
            w.h2d -= h2d
            w.seqs += 1
            self.admitted.append((c, need, tokens, h2d))
        return None

    def commit(self) -> None:
        """Write the admissions and the victims taken into the plan's arrays."""
        w = self.w
        if self.tail is not None:
            self.tail.commit(w)
        if self.admitted:
            rows, need, tokens, h2d = (np.asarray(col, np.int64) for col in zip(*self.admitted))
            w.alloc[rows] = need
            w.sched[rows] = tokens
            w.swap[rows] = h2d
            w.admitted = rows


def _admit(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
    """Admission (:class:`_Walk`). A policy stops at the first candidate that does not fit; LVF walks on
    past a spent budget, over the candidates that do not need it: the first pass admitted every one of
    those it reached, the rest come in a second stream over that kind alone, so a long queue of parked
    requests costs a partition, not a Python loop over every one of them."""
    if (not spec.admit_after_preempt and w.victim[w.running].any()) or w.cands.shape[0] == 0:
        return
    walk = _Walk(ctx, spec, w)
    spent = walk.run(w.cands)
    if spent is not None and spec.discretionary:
        parked = ctx.snap.blocks_dram > 0
        rest = w.is_cand & (~parked if spent == "link" else parked)
        rest[[row for row, *_ in walk.admitted]] = False
        walk.run(np.flatnonzero(rest))
    walk.commit()


def _eager_sync(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
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
    if np.any(snap.phase != _RUNNING) or np.any(snap.busy) or not fits_in_hbm(snap, cap):
        return False
    return not np.any(_full_unsynced(snap, np.arange(n), cap.block_size) > 0)


def fits_in_hbm(snap: Snapshot, cap: Capacity) -> bool:
    """Design §3.2 step 0: every live request's blocks, grown by this step, fit in HBM."""
    need = (snap.num_tokens + cap.block_size - 1) // cap.block_size - snap.blocks_hbm
    return int(np.maximum(need, 0).sum()) <= cap.free_blocks


def build_plan(ctx: Ctx, spec: PolicySpec) -> Plan:
    """Run the four steps of one iteration for ``spec`` and package the result."""
    token_budget = ctx.cap.token_budget
    if spec.token_cap is not None:
        token_budget = min(token_budget, spec.token_cap(ctx.params))
    w = _Work(ctx, spec, token_budget)
    _continue_loads(ctx, spec, w)
    _serve_running(ctx, spec, w)
    _admit(ctx, spec, w)
    _eager_sync(ctx, spec, w)
    return _package(ctx, spec, w)


def _package(ctx: Ctx, spec: PolicySpec, w: _Work) -> Plan:
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
