"""Scheduler side of the DuplexKV connector: which request has which KV in the host pool.

The bytes live in the worker's :class:`superinfer.duplexkv.DuplexKVEngine`; this ledger mirrors the
*counts* so the scheduler can decide, without asking the worker, whether a victim can be parked, how
many tokens a resumed request gets back, and what the core's snapshot says (``blocks_dram``, ``synced``,
``syncing``).

Invariants:

* ``free`` equals the worker pool's free blocks once the worker has applied every emitted step (the
  worker frees dropped requests before allocating for new ones, and allocates exactly the host blocks
  the ledger counted: block indices ``>= host_blocks`` of a request);
* per request, host copies cover a prefix of its blocks: ``confirmed <= issued <= host_blocks``;
* ``parked_tokens > 0`` only for a preempted request whose blocks ``[0, ceil(parked/bs))`` are (or will be,
  before vLLM reuses the device blocks) on the host; it never exceeds what was copied. When the pool or
  the transfer budget is short, only the already-copied full-block prefix is parked and the rest is
  recomputed, counted in ``stats["recompute_fallbacks"]`` — never a silent overwrite.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from superinfer.vllm.kvmeta import DuplexKVMeta


@dataclass
class HostRecord:
    host_blocks: int = 0  # host blocks allocated to this request (indices [0, host_blocks))
    issued: int = 0  # blocks [0, issued) have a current host copy, complete or in flight
    confirmed: int = 0  # blocks [0, confirmed) have a completed host copy (rule 1)
    parked_tokens: int = 0  # tokens restorable on resume (0: not parked)
    parked_full: int = 0  # full blocks among the parked ones (their host copy stays valid after resume)
    pending: list[tuple[int, int]] = field(default_factory=list)  # (step, issued after that step)


class HostLedger:
    """Counts of the host KV pool, per request. All methods are O(1) or O(blocks of one request)."""

    def __init__(self, capacity: int, block_size: int, *, async_load: bool) -> None:
        if capacity < 1 or block_size < 1:
            raise ValueError(f"host ledger needs capacity >= 1 and block_size >= 1, got {capacity}, {block_size}")
        self.capacity = int(capacity)
        self.free = int(capacity)
        self.block_size = int(block_size)
        self.async_load = bool(async_load)
        self.recs: dict[str, HostRecord] = {}
        self.step = 0
        self.stats: collections.Counter[str] = collections.Counter()
        self._syncs: dict[str, list[tuple[int, int]]] = {}
        self._swap_outs: dict[str, tuple[list[int], int]] = {}
        self._loads: list[tuple[str, list[int], bool]] = []
        self._drops: list[str] = []
        self._unconfirmed: set[str] = set()

    # -- what the core sees ----------------------------------------------------------------------
    def counts(self, req_id: str) -> tuple[int, int, int]:
        """``(blocks_dram, synced, syncing)`` of a resident request (0s when it has no record)."""
        rec = self.recs.get(req_id)
        if rec is None:
            return 0, 0, 0
        return rec.host_blocks, rec.confirmed, rec.issued - rec.confirmed

    def parked(self, req_id: str) -> tuple[int, int]:
        """``(parked tokens, host blocks)`` of a preempted request."""
        rec = self.recs.get(req_id)
        return (0, 0) if rec is None else (rec.parked_tokens, rec.host_blocks if rec.parked_tokens else 0)

    # -- eager sync ------------------------------------------------------------------------------
    def plan_sync(self, req_id: str, block_ids: list[int], num_computed: int, n: int) -> int:
        """Queue eager copies of up to ``n`` further full blocks of a running request; returns how many."""
        rec = self.recs.setdefault(req_id, HostRecord())
        full = min(num_computed // self.block_size, len(block_ids))
        items = self._syncs.setdefault(req_id, [])
        done = 0
        while done < n and rec.issued < full:
            i = rec.issued
            if i >= rec.host_blocks:
                if self.free == 0:
                    self.stats["sync_pool_full"] += 1
                    break
                self.free -= 1
                rec.host_blocks = i + 1
            items.append((i, block_ids[i]))
            rec.issued += 1
            done += 1
        if done:
            rec.pending.append((self.step + 1, rec.issued))  # shipped with the next meta
            self._unconfirmed.add(req_id)
            self.stats["sync_blocks"] += done
        return done

    def on_worker(self, d2h_done_step: int, failed: list[str]) -> None:
        """The worker says every sync of steps <= ``d2h_done_step`` finished; mark them synced."""
        for rid in list(self._unconfirmed):
            rec = self.recs.get(rid)
            if rec is None:
                self._unconfirmed.discard(rid)
                continue
            while rec.pending and rec.pending[0][0] <= d2h_done_step:
                rec.confirmed = max(rec.confirmed, min(rec.pending.pop(0)[1], rec.issued))
            if not rec.pending:
                self._unconfirmed.discard(rid)
        for rid in dict.fromkeys(failed):  # a worker (any rank) could not park it
            self.forget(rid)

    def forget(self, req_id: str) -> None:
        """A rank could not park ``req_id``: no rank's host copy may be used (never a mixed state). It is
        recomputed on every rank, and every rank drops its host blocks: a rank whose park succeeded would
        otherwise keep the partly filled tail block marked synced (only a load marks it stale) and skip
        copying it at the next park, restoring stale KV beside the other ranks' fresh KV."""
        rec = self.recs.get(req_id)
        self.stats["worker_park_failures"] += 1
        if rec is None:
            return
        if rec.parked_tokens:
            self.stats["recompute_fallbacks"] += 1
            rec.parked_tokens = 0
        rec.issued = rec.confirmed = rec.parked_full = 0
        rec.pending.clear()
        self._unconfirmed.discard(req_id)
        if rec.host_blocks:
            self.free += rec.host_blocks
            rec.host_blocks = 0
            self._drops.append(req_id)

    # -- preemption and resume -------------------------------------------------------------------
    def preempt(self, req_id: str, block_ids: list[int], num_computed: int, d2h_budget: int) -> tuple[int, int]:
        """Park a victim before vLLM frees its blocks. Returns ``(parked tokens, D2H blocks used)``.

        Copies only the unsynced tail; if the tail does not fit ``d2h_budget`` or the host pool, keeps
        just the full-block prefix that already has a host copy (the rest is recomputed, counted).
        """
        bs = self.block_size
        rec = self.recs.setdefault(req_id, HostRecord())
        self._syncs.pop(req_id, None)  # not yet shipped: the swap-out below covers those blocks
        n = min(-(-num_computed // bs), len(block_ids))
        full = min(num_computed // bs, n)
        have = min(rec.issued, n)
        tail = n - have
        new_host = max(0, n - rec.host_blocks)
        if n == 0:
            keep, tokens = 0, 0
        elif tail <= d2h_budget and new_host <= self.free:
            keep, tokens = n, num_computed
            self.free -= new_host
            rec.host_blocks = max(rec.host_blocks, n)
        else:
            keep = min(have, full)
            tokens = keep * bs
            self.stats["recompute_fallbacks"] += 1
            self.stats["fallback_tokens"] += num_computed - tokens
            tail = 0
        if keep:
            self._swap_outs[req_id] = (list(block_ids[:keep]), min(full, keep))
            self.stats["parks"] += 1
            self.stats["parked_tokens"] += tokens
            self.stats["swap_out_blocks"] += tail
        rec.parked_tokens = tokens
        rec.parked_full = min(full, keep)
        rec.issued = rec.confirmed = keep  # the swap-out completes before the blocks are reused
        rec.pending.clear()
        return tokens, tail

    def matched(self, req_id: str, local_tokens: int) -> tuple[int | None, bool]:
        """vLLM's ``get_num_new_matched_tokens``: parked tokens beyond the local hit. No side effects."""
        rec = self.recs.get(req_id)
        if rec is None or rec.parked_tokens <= local_tokens:
            return 0, False
        if req_id in self._swap_outs:
            return None, False  # parked this very step: resume next step, after the copy-out
        return rec.parked_tokens - local_tokens, self.async_load

    def after_alloc(self, req_id: str, block_ids: list[int], num_external: int) -> None:
        """vLLM allocated blocks for a resumed request; load the parked blocks into them."""
        rec = self.recs.get(req_id)
        if rec is None or not rec.parked_tokens:
            return
        if num_external > 0:
            n = -(-rec.parked_tokens // self.block_size)
            # DuplexKV's swap-in maps block index i to dev_blocks[i] from index 0, so a local prefix hit is
            # reloaded too (same bytes); see docs/vllm-plugin.md.
            self._loads.append((req_id, list(block_ids[:n]), self.async_load))
            self.stats["loads"] += 1
            self.stats["loaded_tokens"] += num_external
            self.stats["swap_in_blocks"] += n
        else:
            self.stats["parked_unused"] += 1  # the local prefix cache covered it
        rec.parked_tokens = 0
        rec.issued = rec.confirmed = rec.parked_full  # a partial tail block goes stale on resume

    def finished(self, req_id: str) -> None:
        """The request left (finished or aborted): its host blocks go back to the pool."""
        rec = self.recs.pop(req_id, None)
        self._syncs.pop(req_id, None)
        self._unconfirmed.discard(req_id)
        if rec is not None and rec.host_blocks:
            self.free += rec.host_blocks
            self._drops.append(req_id)

    # -- per step ---------------------------------------------------------------------------------
    def build_meta(self) -> DuplexKVMeta:
        """Ship this step's transfers to the worker and start the next step."""
        self.step += 1
        syncs = [(rid, i, dev) for rid, items in self._syncs.items() for i, dev in items]
        meta = DuplexKVMeta(
            step=self.step,
            drops=self._drops,
            swap_outs=[(rid, blocks, full) for rid, (blocks, full) in self._swap_outs.items()],
            loads=self._loads,
            syncs=syncs,
        )
        self._syncs, self._swap_outs, self._loads, self._drops = {}, {}, [], []
        return meta
