"""One planning iteration, shared by every policy (design §3.2).

A policy is a :class:`PolicySpec`: three orderings and a few switches. :func:`build_plan` walks them in
four short steps, each a function you can read top to bottom:

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from superinfer.core.types import Capacity, Params, Phase, Plan, Snapshot, TenantTable, VictimMode

_NEG_INF = float("-inf")
_SWAP = int(VictimMode.SWAP)
_RECOMPUTE = int(VictimMode.RECOMPUTE)


@dataclass
class Ctx:
    """Everything an ordering may look at. ``vlt`` is filled only for policies that rank by VLT."""

    snap: Snapshot
    cap: Capacity
    params: Params
    tenants: TenantTable
    now: float
    vlt: np.ndarray | None = None


@dataclass(frozen=True)
class PolicySpec:
    """A scheduling policy as orderings plus switches.

    ``running_order(ctx, rows)``: the order running requests are served.
    ``victim_order(ctx, rows)``: running requests, first victim first.
    ``candidate_order(ctx, rows)``: a stream of waiting/rotary rows, first admitted first.
    """

    name: str
    running_order: Callable[[Ctx, np.ndarray], np.ndarray]
    victim_order: Callable[[Ctx, np.ndarray], np.ndarray]
    candidate_order: Callable[[Ctx, np.ndarray], Iterator[int]]
    decodes_first: bool = False
    discretionary: bool = False  # may preempt running requests to admit a candidate (LVF only)
    save_tail: bool = False  # victims copy their unsynced tail out (else it is recomputed)
    eager_sync: bool = False  # copy full blocks to DRAM as they fill
    admit_after_preempt: bool = False  # vLLM admits nothing in a step that preempted
    token_cap: Callable[[Params], int] | None = None  # sarathi's stall-free budget
    uses_vlt: bool = False


class _Work:
    """The mutable ledger of one plan; rows are snapshot rows."""

    def __init__(self, snap: Snapshot, cap: Capacity, token_budget: int) -> None:
        n = len(snap)
        self.snap = snap
        self.bs = cap.block_size
        self.free = cap.free_blocks
        self.tokens = token_budget
        self.h2d = cap.b_xfer
        self.d2h = cap.b_xfer
        self.dram = cap.dram_free_blocks
        # The row sets every step works on, computed once (each is one pass over all rows).
        running = snap.phase == Phase.RUNNING
        idle = ~snap.busy
        loading = snap.h2d_pending > 0
        self.running = np.flatnonzero(running & ~loading & idle)  # servable and preemptible
        self.loading = np.flatnonzero(loading & idle)  # swap-ins under way
        self.cands = np.flatnonzero(~running & (snap.blocks_hbm == 0) & idle)  # waiting and parked
        self.seqs = int(np.count_nonzero(running | (snap.blocks_hbm > 0)))
        self.max_seqs = cap.max_num_seqs
        self.admitted: list[int] = []
        self.sched = np.zeros(n, np.int64)
        self.alloc = np.zeros(n, np.int64)
        self.swap = np.zeros(n, np.int64)
        self.victim = np.zeros(n, np.bool_)
        self.victim_d2h = np.zeros(n, np.int64)
        self.victim_mode = np.zeros(n, np.int8)
        self.forced = np.zeros(n, np.bool_)
        self.sync = np.zeros(n, np.int64)

    def unsynced(self, r: int) -> int:
        """Device blocks of ``r`` holding KV with no host copy, finished or in flight."""
        s = self.snap
        data = (int(s.num_computed[r]) + self.bs - 1) // self.bs
        return max(0, min(data, int(s.blocks_hbm[r])) - int(s.synced[r]) - int(s.syncing[r]))

    def preempt(self, r: int, *, forced: bool, save_tail: bool, blocks: int = -1, unsynced: int = -1) -> None:
        """Make ``r`` a victim: return what it was given, free its blocks, copy out what fits.

        ``blocks`` and ``unsynced`` may be passed when the caller already knows them.
        """
        sched, alloc = int(self.sched[r]), int(self.alloc[r])
        if sched:
            self.tokens += sched
            self.sched[r] = 0
        if alloc:
            self.alloc[r] = 0
        self.free += alloc + (blocks if blocks >= 0 else int(self.snap.blocks_hbm[r]))
        self.seqs -= 1
        if unsynced < 0:
            unsynced = self.unsynced(r)
        copy = min(unsynced, self.d2h, self.dram) if save_tail else 0
        self.d2h -= copy
        self.dram -= copy
        self.victim[r] = True
        self.victim_d2h[r] = copy
        self.victim_mode[r] = _SWAP if copy == unsynced else _RECOMPUTE
        self.forced[r] = forced

    def growth(self, r: int, tokens: int) -> int:
        s = self.snap
        need = (int(s.num_computed[r]) + tokens + self.bs - 1) // self.bs - int(s.blocks_hbm[r])
        return need if need > 0 else 0


def _continue_loads(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
    s = ctx.snap
    rows = w.loading
    if rows.shape[0] == 0:
        return
    for r in spec.candidate_order(ctx, rows):
        if w.h2d == 0:
            return
        n = min(int(s.h2d_pending[r]), w.h2d)
        w.swap[r] = n
        w.h2d -= n


def _next_victim(order: np.ndarray, pos: int, w: _Work) -> tuple[int, int]:
    """The next row of ``order`` from ``pos`` that is not yet a victim."""
    while pos < order.shape[0]:
        v = int(order[pos])
        if not w.victim[v]:
            return v, pos
        pos += 1
    return -1, pos


def _serve_running(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
    s = ctx.snap
    rows = w.running
    if rows.shape[0] == 0:
        return
    to_compute = s.num_tokens[rows] - s.num_computed[rows]
    rows = rows[to_compute > 0]
    to_compute = s.num_tokens[rows] - s.num_computed[rows]
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
    victims = spec.victim_order(ctx, rows)
    vpos = 0
    for r in order.tolist():
        if w.victim[r]:
            continue
        remaining = int(s.num_tokens[r] - s.num_computed[r])
        tokens = 1 if remaining == 1 else min(remaining, w.tokens)
        if tokens <= 0 or w.tokens <= 0:
            break
        need = w.growth(r, tokens)
        while need > w.free:
            v, vpos = _next_victim(victims, vpos, w)
            w.preempt(v, forced=True, save_tail=spec.save_tail)
            if v == r:  # the request itself was next in line: it waits, as in vLLM
                break
        if w.victim[r]:
            continue
        w.sched[r] = tokens
        w.alloc[r] = need
        w.free -= need
        w.tokens -= tokens


class _VictimTail:
    """LVF's discretionary victims: running requests from the tail of L (ascending VLT), with the
    columns the walk needs copied to Python lists once, so each look costs no numpy scalar access."""

    def __init__(self, ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
        s, p = ctx.snap, ctx.params
        rows = spec.victim_order(ctx, w.running)
        data = (s.num_computed[rows] + w.bs - 1) // w.bs
        unsynced = np.maximum(np.minimum(data, s.blocks_hbm[rows]) - s.synced[rows] - s.syncing[rows], 0)
        self.rows = rows.tolist()
        self.vlt = ctx.vlt[rows].tolist()
        self.guard_ok = ((s.residency[rows] >= p.min_residency) & (s.rotations[rows] < p.max_rotations)).tolist()
        self.blocks = s.blocks_hbm[rows].tolist()
        self.unsynced = unsynced.tolist()
        self.pos = 0

    def take(self, w: _Work, need: int, vlt_c: float) -> list[tuple[int, int, int]]:
        """Victims (row, blocks, unsynced) that free ``need`` blocks, all ranked below ``vlt_c``, or
        ``[]`` if impossible.

        Looks only: the caller preempts what is returned. Rows passed over here (guarded, or with a
        tail that does not fit what is left of the budget) can never qualify later in this walk:
        budgets only shrink and later candidates rank lower.
        """
        chosen: list[tuple[int, int, int]] = []
        freed = 0
        d2h, dram = w.d2h, w.dram
        pos, n = self.pos, len(self.rows)
        while pos < n and freed < need:
            if self.vlt[pos] >= vlt_c:
                break  # ascending: no later row qualifies either
            v = self.rows[pos]
            k = pos
            pos += 1
            if not self.guard_ok[k] or w.victim[v]:
                continue
            unsynced = self.unsynced[k]
            if unsynced > d2h or unsynced > dram:
                continue  # a discretionary rotation never drops KV
            d2h -= unsynced
            dram -= unsynced
            freed += self.blocks[k] + int(w.alloc[v])
            chosen.append((v, self.blocks[k], unsynced))
        self.pos = pos
        return chosen if freed >= need else []


def _admit(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
    """Walk candidates in the policy's order. When the link budget (or the token budget) runs out, the
    walk restarts over the candidates that do not need it, so a long queue of parked requests costs a
    partition, not a Python loop over every one of them."""
    s = ctx.snap
    if not spec.admit_after_preempt and w.victim[w.running].any():
        return
    pool = w.cands
    if pool.shape[0] == 0:
        return
    walk = _Walk(ctx, spec, w)
    while pool.shape[0]:
        outcome = walk.run(spec.candidate_order(ctx, pool))
        if outcome == "done" or not spec.discretionary:
            return
        keep = ~walk.seen[pool] & ((s.blocks_dram[pool] == 0) if outcome == "no_link" else (s.blocks_dram[pool] > 0))
        pool = pool[keep]
        if (w.h2d == 0 and w.tokens == 0) or pool.shape[0] == 0:
            return


class _Walk:
    """One pass over a candidate stream; ``run`` says why it stopped."""

    def __init__(self, ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
        s = ctx.snap
        self.ctx, self.spec, self.w = ctx, spec, w
        self.seen = np.zeros(len(s), np.bool_)
        victims = w.running[w.victim[w.running]]
        self.floor = float(ctx.vlt[victims].max()) if (ctx.vlt is not None and victims.shape[0]) else _NEG_INF
        self.tail = _VictimTail(ctx, spec, w) if spec.discretionary else None

    def run(self, stream: Iterator[int]) -> str:
        ctx, spec, w, s = self.ctx, self.spec, self.w, self.ctx.snap
        vlt = ctx.vlt
        for c in stream:
            self.seen[c] = True
            if w.seqs >= w.max_seqs:
                return "done"
            if vlt is not None and vlt[c] <= self.floor:
                return "done"  # never admit below a request that was preempted this iteration
            swap_in = int(s.blocks_dram[c]) > 0
            if swap_in:
                if w.h2d == 0:
                    return "no_link"
                tokens, need, h2d = 0, int(s.blocks_dram[c]), min(int(s.blocks_dram[c]), w.h2d)
            else:
                tokens = min(int(s.num_tokens[c] - s.num_computed[c]), w.tokens)
                if tokens <= 0:
                    return "no_tokens"
                need, h2d = w.growth(c, tokens), 0
            if need > w.free:
                if not spec.discretionary:
                    return "done"
                vlt_c = float(vlt[c])
                chosen = self.tail.take(w, need - w.free, vlt_c)
                if not chosen:
                    return "done"
                for v, blocks, unsynced in chosen:
                    w.preempt(v, forced=False, save_tail=True, blocks=blocks, unsynced=unsynced)
                self.floor = max(self.floor, float(vlt[chosen[-1][0]]))
            w.alloc[c] = need
            w.free -= need
            w.sched[c] = tokens
            w.tokens -= tokens
            w.swap[c] = h2d
            w.h2d -= h2d
            w.seqs += 1
            w.admitted.append(c)
        return "done"


def _eager_sync(ctx: Ctx, spec: PolicySpec, w: _Work) -> None:
    s = ctx.snap
    if not spec.eager_sync or w.d2h == 0 or w.dram == 0:
        return
    rows = w.running[~w.victim[w.running]]
    unsynced_full = np.minimum(s.num_computed[rows] // w.bs, s.blocks_hbm[rows]) - s.synced[rows] - s.syncing[rows]
    rows = rows[unsynced_full > 0]
    if rows.shape[0] == 0:
        return
    order = spec.victim_order(ctx, rows)  # likeliest victims first
    want = np.minimum(s.num_computed[order] // w.bs, s.blocks_hbm[order]) - s.synced[order] - s.syncing[order]
    budget = min(w.d2h, w.dram)
    before = np.concatenate(([0], np.cumsum(want)[:-1]))
    give = np.clip(budget - before, 0, want)
    w.sync[order] = give
    used = int(give.sum())
    w.d2h -= used
    w.dram -= used


def fits_in_hbm(snap: Snapshot, cap: Capacity) -> bool:
    """Design §3.2 step 0: every live request's blocks, grown by this step, fit in HBM."""
    need = (snap.num_tokens + cap.block_size - 1) // cap.block_size - snap.blocks_hbm
    return int(np.maximum(need, 0).sum()) <= cap.free_blocks


def build_plan(ctx: Ctx, spec: PolicySpec) -> Plan:
    """Run the four steps of one iteration for ``spec`` and package the result."""
    token_budget = ctx.cap.token_budget
    if spec.token_cap is not None:
        token_budget = min(token_budget, spec.token_cap(ctx.params))
    w = _Work(ctx.snap, ctx.cap, token_budget)
    _continue_loads(ctx, spec, w)
    _serve_running(ctx, spec, w)
    _admit(ctx, spec, w)
    _eager_sync(ctx, spec, w)
    return _package(ctx, spec, w)


def _package(ctx: Ctx, spec: PolicySpec, w: _Work) -> Plan:
    ids = ctx.snap.req_id
    # Only these rows can carry a decision; scanning them instead of every row keeps row order.
    touched = np.sort(np.concatenate((w.running, w.loading, np.asarray(w.admitted, np.int64))))
    sched = touched[w.sched[touched] != 0]
    alloc = touched[w.alloc[touched] != 0]
    swap = touched[w.swap[touched] != 0]
    vict = touched[w.victim[touched]]
    sync = touched[w.sync[touched] != 0]
    return Plan(
        policy=spec.name,
        sched_ids=ids[sched],
        sched_tokens=w.sched[sched],
        alloc_ids=ids[alloc],
        alloc_blocks=w.alloc[alloc],
        swap_ids=ids[swap],
        swap_blocks=w.swap[swap],
        victim_ids=ids[vict],
        victim_d2h=w.victim_d2h[vict],
        victim_mode=w.victim_mode[vict],
        victim_forced=w.forced[vict],
        sync_ids=ids[sync],
        sync_blocks=w.sync[sync],
    )
