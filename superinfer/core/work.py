"""The scratch state of one planning iteration (:func:`superinfer.core.planner.build_plan`): the row sets,
what is left of each budget, and the per-row decisions that become the plan."""

from __future__ import annotations

import numpy as np

from superinfer.core.orders import Ctx, PolicySpec
from superinfer.core.types import Phase, VictimMode

RUNNING = int(Phase.RUNNING)  # a plain int: comparing an array with an IntEnum member is several times slower
SWAP = int(VictimMode.SWAP)
RECOMPUTE = int(VictimMode.RECOMPUTE)


class Work:
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
        self.sync_loads = bool(cap.sync_loads)
        # The row sets every step works on, computed once (each is one pass over all rows).
        running = snap.phase == RUNNING
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
        self.victim_mode[r] = SWAP if copy == unsynced else RECOMPUTE
