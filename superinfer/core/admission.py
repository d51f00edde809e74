"""Admission, step 3 of a planning iteration (design §3.2): waiting and rotary requests in the policy's
candidate order while memory, tokens, sequences and the host-to-device budget allow; LVF may take
discretionary victims (:class:`VictimTail`) and, as RotaSched v2, backfill past a candidate that cannot be
made to fit (:class:`Walk`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from superinfer.core.orders import Ctx, PolicySpec
from superinfer.core.work import SWAP, Work

_NEG_INF = float("-inf")
#: candidates backfill passes over at most per plan (as an HPC scheduler's backfill scan depth, e.g.
#: Slurm's bf_max_job_test): bounds the walk when thousands wait and few blocks are free
BACKFILL_SCAN = 64


class VictimTail:
    """LVF's discretionary victims: running requests from the tail of L (ascending VLT).

    Built on the first candidate that needs room. The columns the walk looks at are copied to Python
    lists once, so each look costs no numpy scalar access; the victims taken are written to the plan's
    arrays once, by :meth:`commit`. Rows passed over (guarded, already a forced victim, or with a tail
    that does not fit what is left of the budget) can never qualify later in the walk: budgets only
    shrink and later candidates rank lower.
    """

    def __init__(self, ctx: Ctx, w: Work) -> None:
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

    def take(self, w: Work, need: int, vlt_c: float) -> bool:
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

    def commit(self, w: Work) -> None:
        """Write the victims taken into the plan's arrays."""
        rows = self.rows[self.taken]
        w.victim[rows] = True
        w.victim_d2h[rows] = self.copy[self.taken]
        w.victim_mode[rows] = SWAP
        w.sched[rows] = w.alloc[rows] = 0


def swap_in_blocks(dram: int | np.ndarray, computed: int | np.ndarray, bs: int) -> int | np.ndarray:
    """Device blocks a swap-in of a request with ``dram`` host blocks and ``computed`` tokens of KV takes: its
    host blocks and the block its next token is written to. A request parked at a block boundary (every forced
    park: it had just filled its last block) needs one block more than it parked, as vLLM allocates on resume;
    reserving only the parked blocks admits a request that cannot take its next step, which then forces a
    park at once (the twin) or fails vLLM's allocation and blocks the waiting queue behind it (the plugin;
    docs/fidelity.md, 2026-12-01)."""
    return np.maximum(dram, (computed + bs) // bs) if isinstance(dram, np.ndarray) else max(dram, (computed + bs) // bs)


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


class Walk:
    """Admission: walks candidates in the policy's order and admits each while memory, tokens,
    sequences and the host-to-device budget allow (a candidate parked in DRAM is a swap-in: it needs
    the link and no tokens; any other needs tokens and no link). Only LVF preempts running requests to
    make room, and never admits a request ranked at or below one preempted this iteration.

    Backfill (RotaSched v2, ``params.backfill``): where the walk would stop at a candidate that cannot be
    made to fit, it records that candidate as *blocked* and, if the blocked one is still ahead of its SLO
    (:func:`slo_slack` > 0), goes on admitting the later candidates that fit in the free blocks as they are
    (never taking a victim for them), until :data:`BACKFILL_SCAN` candidates were passed over or no block is
    free; otherwise it stops there, as without backfill. It backfills only while the running request that a
    forced park would take next can afford one (:meth:`_next_victim_can_wait`)."""

    def __init__(self, ctx: Ctx, spec: PolicySpec, w: Work) -> None:
        self.ctx, self.spec, self.w = ctx, spec, w
        forced = w.running[w.victim[w.running]]
        self.ranked = ctx.vlt is not None
        self.floor = float(ctx.vlt[forced].max()) if (self.ranked and forced.shape[0]) else _NEG_INF
        self.tail: VictimTail | None = None
        self.admitted: list[tuple[int, int, int, int]] = []  # (row, blocks, tokens, host-to-device blocks)
        self.backfill = bool(spec.slo_guards and ctx.params.backfill)
        self.blocked: int | None = None  # the first candidate passed over by backfill
        self.passed = 0  # candidates passed over so far

    def _pass_over(self, c: int) -> bool:
        """``c`` cannot be made to fit: True to backfill past it, False to stop the walk here."""
        if self.blocked is None:
            if not self.backfill or slo_slack(self.ctx, np.array([c]))[0] <= 0 or not self._next_victim_can_wait():
                return False
            self.blocked = c
        self.passed += 1
        return self.passed <= BACKFILL_SCAN and self.w.free > 0

    def _next_victim_can_wait(self) -> bool:
        """Backfilled requests grow into the blocks running decodes need next, so backfill can force a running
        request to park later. It is allowed only while the one a forced park would take next (the head of
        the victim order) has the slack a discretionary victim needs (``slack_gate_s``): the same bar for
        parking a request on purpose and for putting it at risk of a park. Without it, on the real CPU engine
        under deep overload (64 blocks, TBT 10 ms, decodes banking well under a second), backfill filled the
        blocks parked decodes were waiting for, forced ~9 of 10 parks and cost 46 pp of TBT attainment
        (docs/measurements.md, 2026-12-05)."""
        order = self.w.victim_order()
        order = order[~self.w.victim[order]]
        return order.shape[0] == 0 or bool(slo_slack(self.ctx, order[:1])[0] >= self.ctx.params.slack_gate_s)

    def run(self, rows: np.ndarray) -> str | None:
        """Walk ``rows``; returns ``"link"`` or ``"tokens"`` if it stopped at a candidate that needs a
        budget that is spent, else None."""
        spec, w, hopeless = self.spec, self.w, self.ctx.hopeless
        for c, vlt_c, dram, computed, todo in _candidates(self.ctx, spec, rows):
            if w.seqs >= w.max_seqs or (self.ranked and vlt_c <= self.floor):
                return None
            if dram > 0 and w.sync_loads and w.h2d >= dram and w.tokens > 0:
                # loaded whole before this iteration's compute, which it joins (Capacity.sync_loads); one
                # that the link or the tokens cannot take whole this iteration loads as below
                tokens = min(todo, w.tokens)
                need, h2d = max(dram, (computed + tokens + w.bs - 1) // w.bs), dram
            elif dram > 0:  # a swap-in: reserve its blocks and its next token's, copy what the link allows now
                if w.h2d == 0:
                    return "link"
                tokens, need, h2d = 0, swap_in_blocks(dram, computed, w.bs), min(dram, w.h2d)
            else:  # a candidate holds no device blocks: it needs blocks for what it computes now
                tokens = min(todo, w.tokens)
                if tokens <= 0:
                    return "tokens"
                need, h2d = (computed + tokens + w.bs - 1) // w.bs, 0
            if need > w.free:
                # a request past its TTFT SLO takes only free room; backfilled ones too
                may_preempt = spec.discretionary and self.blocked is None and not (hopeless is not None and hopeless[c])
                if may_preempt:
                    self.tail = self.tail or VictimTail(self.ctx, w)
                if not (may_preempt and self.tail.take(w, need - w.free, vlt_c)):  # type: ignore[union-attr]
                    if self._pass_over(c):
                        continue
                    return None
                self.floor = max(self.floor, self.tail.vlt[self.tail.taken[-1]])  # type: ignore[union-attr]
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


def admit(ctx: Ctx, spec: PolicySpec, w: Work) -> None:
    """Admission (:class:`Walk`). A policy stops at the first candidate that does not fit; LVF walks on
    past a spent budget, over the candidates that do not need it: the first pass admitted every one of
    those it reached, the rest come in a second stream over that kind alone, so a long queue of parked
    requests costs a partition, not a Python loop over every one of them."""
    if (not spec.admit_after_preempt and w.victim[w.running].any()) or w.cands.shape[0] == 0:
        return
    walk = Walk(ctx, spec, w)
    spent = walk.run(w.cands)
    if spent is not None and spec.discretionary:
        parked = ctx.snap.blocks_dram > 0
        rest = w.is_cand & (~parked if spent == "link" else parked)
        rest[[row for row, *_ in walk.admitted]] = False
        walk.run(np.flatnonzero(rest))
    walk.commit()
