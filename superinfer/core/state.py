"""The engine-side state a policy plans over: the core's request table plus the KV ledger.

The simulator and the property tests drive a request through its life with four calls per iteration::

    plan = policy.plan(state.snapshot(), state.capacity(b_xfer, tokens, seqs), params, tenants, now)
    moves = state.apply(plan, now)           # blocks change hands; returns the copies to make
    ...                                      # the engine spends time computing and copying
    state.complete_transfers(t_end)          # copies issued this iteration have finished
    sampled = state.advance(plan, t_end)     # scheduled tokens computed; who sampled, who finished

The request columns and their state changes are :class:`~superinfer.core.table.RequestTable`'s (the
vLLM plugin keeps the same table); this class adds the ledger that owns block counts, the counters and
admission control. Invariants (``check()``): every request that ever arrived is
live, finished, rejected-with-reason, aborted or shed; live rows mirror the ledger's block counts; a request with
computed tokens holds them in HBM or DRAM.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from superinfer.core.blocks import KVLedger
from superinfer.core.table import RequestTable
from superinfer.core.types import Capacity, Phase, Plan, blocks_for

@dataclass
class Moves:
    """The copies one plan asks for, as (source id, destination id) block pairs per kind."""

    swap_in: list[tuple[int, int]] = field(default_factory=list)  # host -> device
    swap_out: list[tuple[int, int]] = field(default_factory=list)  # device -> host (victim tails)
    sync: list[tuple[int, int]] = field(default_factory=list)  # device -> host (eager)

    @property
    def h2d_blocks(self) -> int:
        return len(self.swap_in)

    @property
    def d2h_blocks(self) -> int:
        return len(self.swap_out) + len(self.sync)


@dataclass
class Finished:
    """What the engine reports about a request that left."""

    req_id: int
    tenant: int
    t_arr: float
    t_first: float
    t_end: float
    outputs: int
    rotations: int


@dataclass
class Sampled:
    """Who produced a token in one :meth:`EngineState.advance`, computed where the state changed.

    ``ids``/``tenant``: every request that sampled; ``first_ids``/``first_ttft``/``first_tenant``: those
    whose token was their first (TTFT = token time - arrival); ``gaps``/``gap_tenant``: the inter-token
    gap of every other sampler; ``finished``: the requests that left with this token.
    """

    ids: np.ndarray
    tenant: np.ndarray
    first_ids: np.ndarray
    first_ttft: np.ndarray
    first_tenant: np.ndarray
    gaps: np.ndarray
    gap_tenant: np.ndarray
    finished: list[Finished]

    @classmethod
    def none(cls) -> "Sampled":
        i, f = np.zeros(0, np.int64), np.zeros(0)
        return cls(i, i, i, f, i, f, i, [])


@dataclass
class Counters:
    arrived: int = 0
    finished: int = 0
    rejected: int = 0
    aborted: int = 0
    shed: int = 0  # no first token by the tenant's deadline (shed_expired)
    shed_with_kv: int = 0  # of those, how many held KV by then
    preemptions: int = 0
    rotations: int = 0
    recompute_fallbacks: int = 0
    swap_ins: int = 0
    h2d_blocks: int = 0
    d2h_blocks: int = 0


class EngineState(RequestTable):
    """The request table of one engine plus its KV ledger and counters."""

    def __init__(self, hbm_blocks: int, dram_blocks: int, block_size: int, *, grow: int = 1024) -> None:
        if block_size < 1:
            raise ValueError(f"block_size: must be >= 1, got {block_size}")
        super().__init__(grow)
        self.block_size = block_size
        self.ledger = KVLedger(hbm_blocks, dram_blocks)
        self.counters = Counters()
        self.rejections: list[tuple[int, str]] = []

    # ---- lifecycle ---------------------------------------------------------------------------
    def admit(
        self,
        req_id: int,
        t_arr: float,
        prompt_tokens: int,
        max_output: int,
        *,
        tenant: int = 0,
        priority: int = 0,
        pred_remaining: float = 0.0,
        max_model_len: int | None = None,
    ) -> bool:
        """Admit a request to the queue; returns False (and records why) if it can never run."""
        self.counters.arrived += 1
        reason = None
        if prompt_tokens < 1 or max_output < 1:
            reason = f"prompt_tokens and max_output must be >= 1 (got {prompt_tokens}, {max_output})"
        elif req_id in self:
            reason = f"duplicate request id {req_id}"
        else:
            need = blocks_for(prompt_tokens + max_output - 1, self.block_size)
            if need > self.ledger.hbm.num_blocks:
                reason = f"needs {need} KV blocks, HBM holds {self.ledger.hbm.num_blocks}"
            elif max_model_len is not None and prompt_tokens + max_output > max_model_len:
                reason = f"prompt {prompt_tokens} + output {max_output} exceeds max_model_len {max_model_len}"
        if reason is not None:
            self.counters.rejected += 1
            self.rejections.append((req_id, reason))
            return False
        self.add(req_id, t_arr, prompt_tokens, target_output=max_output, tenant=tenant, priority=priority,
                 pred_remaining=pred_remaining)
        return True

    def _retire(self, req_id: int) -> None:
        self.ledger.free(req_id)
        self.remove(req_id)

    def abort(self, req_id: int) -> None:
        """Drop a request wherever it is; both tiers are freed."""
        if req_id not in self:
            raise KeyError(f"abort: unknown request {req_id}")
        self.counters.aborted += 1
        self._retire(req_id)

    def shed_expired(self, now: float, max_queue_s: np.ndarray, tenants: list[int] | None = None) -> list[int]:
        """Shed every request still without a first token after its tenant's deadline
        (``now - t_arr > max_queue_s[tenant]``), as a client's timeout would drop it; its blocks in both tiers
        are freed. ``counters.shed_with_kv`` counts those that held KV by then (work spent for nothing:
        what early shedding is meant to avoid). Returns the shed ids, in row order; ``tenants``, if given, is
        extended with their tenant indices in the same order."""
        rows = self.live_rows()
        if not rows.shape[0]:
            return []
        late = (self.outputs[rows] == 0) & (now - self.t_arr[rows] > max_queue_s[self.tenant[rows]])
        late_rows = rows[late]
        ids = self.req_id[late_rows].tolist()
        if tenants is not None:
            tenants.extend(self.tenant[late_rows].tolist())
        held = (self.num_computed[late_rows] > 0) | (self.blocks_hbm[late_rows] > 0) | (self.blocks_dram[late_rows] > 0)
        self.counters.shed += len(ids)
        self.counters.shed_with_kv += int(held.sum())
        for rid in ids:
            self._retire(rid)
        return ids

    # ---- planning inputs ---------------------------------------------------------------------
    def capacity(self, b_xfer: int, token_budget: int, max_num_seqs: int, sync_loads: bool = False) -> Capacity:
        return Capacity(
            hbm_blocks=self.ledger.hbm.num_blocks,
            free_blocks=self.ledger.hbm.free,
            b_xfer=b_xfer,
            token_budget=token_budget,
            max_num_seqs=max_num_seqs,
            block_size=self.block_size,
            dram_free_blocks=self.ledger.dram.free,
            sync_loads=sync_loads,
        )

    # ---- applying a plan ---------------------------------------------------------------------
    def _sync_counts(self, r: int) -> None:
        dev, host, synced = self.ledger.blocks(int(self.req_id[r]))
        self.blocks_hbm[r] = dev
        self.blocks_dram[r] = host
        self.synced[r] = synced
        self.syncing[r] = self.ledger.syncing.get(int(self.req_id[r]), 0)

    def apply(self, plan: Plan, now: float, *, lossless_victims: bool = False,
              rows: np.ndarray | None = None) -> Moves:
        """Move blocks as ``plan`` says. ``lossless_victims``: count dropped KV as a recompute fallback.
        ``rows``: ``rows_of(plan.sched_ids)`` if the caller already has it (as for :meth:`advance`)."""
        moves = Moves()
        led, bs, c = self.ledger, self.block_size, self.counters
        row = self._row
        for rid, d2h in zip(plan.victim_ids.tolist(), plan.victim_d2h.tolist()):
            r = row[rid]
            keep = int(self.synced[r] + self.syncing[r] + d2h)
            moves.swap_out.extend(led.swap_out(rid, d2h, keep))
            self._sync_counts(r)
            kept_tokens = int(self.blocks_dram[r]) * bs
            if kept_tokens < self.num_computed[r] and lossless_victims:
                c.recompute_fallbacks += 1
            self.preempted(r, min(int(self.num_computed[r]), kept_tokens))
            c.preemptions += 1
            if self.blocks_dram[r] > 0:
                c.rotations += 1
        computing = set(plan.sched_ids.tolist()) if plan.swap_ids.shape[0] else set()
        for rid, n in zip(plan.swap_ids.tolist(), plan.swap_blocks.tolist()):
            r = row[rid]
            if self.blocks_hbm[r] == 0:  # a new swap-in: reserve all its blocks now
                moves.swap_in.extend(led.start_swap_in(rid, n))
                self.h2d_pending[r] = int(self.blocks_dram[r]) - n
                c.swap_ins += 1
            else:
                done = int(self.blocks_dram[r] - self.h2d_pending[r])
                moves.swap_in.extend(led.continue_swap_in(rid, done, n))
                self.h2d_pending[r] -= n
            self._sync_counts(r)
            if rid in computing:  # a synchronous load (Capacity.sync_loads): whole before this compute
                led.complete_swap_in(rid)
                self._sync_counts(r)
                self.joined(r, now, swapped_in=True)
        swapping = set(plan.swap_ids.tolist())
        for rid, n in zip(plan.alloc_ids.tolist(), plan.alloc_blocks.tolist()):
            r = row[rid]
            if rid in swapping:
                n -= int(self.blocks_hbm[r])  # the swap-in reserved its host blocks above
                if n <= 0:
                    continue  # a synchronous load that computes may grow past them
            led.grow(rid, n)
            self.blocks_hbm[r] += n
        if plan.sched_ids.shape[0]:
            rows = self.rows_of(plan.sched_ids) if rows is None else rows
            self.joined(rows[self.phase[rows] != Phase.RUNNING], now, swapped_in=False)
        for rid, n in zip(plan.sync_ids.tolist(), plan.sync_blocks.tolist()):
            r = row[rid]
            moves.sync.extend(led.start_sync(rid, n))
            self.syncing[r] += n
            self.blocks_dram[r] += n
        c.h2d_blocks += moves.h2d_blocks
        c.d2h_blocks += moves.d2h_blocks
        return moves

    def complete_transfers(self, now: float) -> None:
        """Every copy issued so far has finished: syncs count as synced, loaded swap-ins run."""
        rows = self.live_rows()
        syncing = rows[self.syncing[rows] > 0]
        for r in syncing.tolist():
            self.ledger.complete_sync(int(self.req_id[r]))
            self.synced[r] += self.syncing[r]
            self.syncing[r] = 0
        loading = rows[(self.phase[rows] != Phase.RUNNING) & (self.blocks_hbm[rows] > 0) & (self.h2d_pending[rows] == 0)]
        for r in loading.tolist():
            self.ledger.complete_swap_in(int(self.req_id[r]))
            self.synced[r] = self.blocks_dram[r]
        self.joined(loading, now, swapped_in=True)

    def advance(self, plan: Plan, t_end: float, rows: np.ndarray | None = None) -> Sampled:
        """The scheduled tokens were computed by ``t_end``; sample outputs, retire finished requests.

        ``rows``: ``rows_of(plan.sched_ids)`` if the caller already has it. Returns who sampled.
        """
        out = Sampled.none()
        if plan.sched_ids.shape[0]:
            rows = self.rows_of(plan.sched_ids) if rows is None else rows
            self.num_computed[rows] += plan.sched_tokens
            sampled = rows[self.num_computed[rows] == self.num_tokens[rows]]
            had = sampled[self.outputs[sampled] > 0]
            first = sampled[self.outputs[sampled] == 0]
            out = Sampled(self.req_id[sampled].copy(), self.tenant[sampled].copy(),
                          self.req_id[first].copy(), t_end - self.t_arr[first], self.tenant[first].copy(),
                          t_end - self.t_last[had], self.tenant[had].copy(), [])
            self.token_sampled(sampled, t_end)
            finished = sampled[self.outputs[sampled] >= self.target_output[sampled]]
            self.num_tokens[sampled[self.outputs[sampled] < self.target_output[sampled]]] += 1
            for r in finished.tolist():
                out.finished.append(Finished(int(self.req_id[r]), int(self.tenant[r]), float(self.t_arr[r]),
                                             float(self.t_first[r]), t_end, int(self.outputs[r]),
                                             int(self.rotations[r])))
                self._retire(int(self.req_id[r]))
            self.counters.finished += len(out.finished)
        self.tick()
        return out

    # ---- invariants --------------------------------------------------------------------------
    def check(self) -> None:
        """Raise ``RuntimeError`` if the table and ledger disagree or a request was lost."""
        self.ledger.check()
        c = self.counters
        if c.arrived != c.finished + c.rejected + c.aborted + c.shed + len(self):
            raise RuntimeError(
                f"conservation: arrived {c.arrived} != finished {c.finished} + rejected {c.rejected} "
                f"+ aborted {c.aborted} + shed {c.shed} + live {len(self)}"
            )
        for rid, r in self._row.items():
            dev, host, synced = self.ledger.blocks(rid)
            if (dev, host, synced) != (self.blocks_hbm[r], self.blocks_dram[r], self.synced[r]):
                raise RuntimeError(f"request {rid}: table ({self.blocks_hbm[r]}, {self.blocks_dram[r]}, "
                                   f"{self.synced[r]}) != ledger ({dev}, {host}, {synced})")
            held = (dev + host) * self.block_size
            if self.num_computed[r] > held:
                raise RuntimeError(f"request {rid}: {self.num_computed[r]} computed tokens but KV for {held}")
