"""Worker side of the DuplexKV connector: moves the bytes with :class:`superinfer.duplexkv.DuplexKVEngine`.

Per step, in vLLM's order (see docs/vllm-notes.md):

1. ``handle_preemptions`` (before vLLM zeroes or overwrites any block of this step): wait for the copies
   of dropped requests and free their host blocks; park preempted requests (copy only their unsynced
   tail) and wait for it, so their device blocks can be reused by this step's forward (rules 1, 2);
2. ``start_load_kv``: copy parked blocks back. Synchronous loads are waited for before the forward
   (rule 5); asynchronous ones complete in the background and are reported by ``get_finished`` — vLLM
   does not schedule the request (so nothing reads its blocks) until then;
3. ``wait_for_save`` (after the forward wrote this step's KV, rule 4): issue eager syncs of full blocks;
   they are never waited for in the step. ``report()`` tells the scheduler which steps' syncs finished.

Invariant: the host pool changes only in the order the scheduler-side ledger assumed (free, then
allocate), so :class:`superinfer.duplexkv.HostPoolFull` here means the mirror broke; it is logged,
counted and reported, never ignored.

Cost sums (``stats``, :data:`KV_KINDS`): each park (one call per step, all of its victims), each load (one
per request) and each eager sync (one call per step) adds its wall time in the hook (submit and, where the
step waits, the wait) against the blocks it copied (operations that copied nothing are not timed), as the
sums of a least-squares line ``ns = a + b * blocks`` (``{kind}_n``, ``_x``, ``_xx``, ``_ns``, ``_ns_x``): the
twin's ``host_kv`` term (docs/fidelity.md).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

import torch

from superinfer.duplexkv import DuplexKVEngine, DuplexKVError, KVLayout, Segment, Ticket, TransferPlan
from superinfer.duplexkv.executor import InlineExecutor
from superinfer.vllm.kvmeta import DuplexKVMeta, DuplexKVWorkerMeta

log = logging.getLogger(__name__)

#: final state of every worker closed in this process (pool free/capacity, counters), for inspection by
#: tests and benchmarks of in-process engines; never read by the connector itself.
CLOSED: list[dict[str, Any]] = []

#: the connector's timed operations (module docstring)
KV_KINDS = ("park", "load", "sync")


def storage_layout(kv_caches: dict[str, torch.Tensor]) -> KVLayout:
    """A :class:`KVLayout` over vLLM's per-layer KV tensors, addressed from the start of their storage.

    vLLM may hand out per-layer *views* into one allocation (non-zero ``storage_offset``). DuplexKV's torch
    backend addresses strided copies with ``Tensor.as_strided(..., storage_offset)``, which is absolute in
    the storage, so a view's own offset would be ignored (found here: runs of adjacent blocks landed in the
    wrong layer). We therefore give DuplexKV one flat ``uint8`` tensor per *storage* (offset 0) and fold each
    layer's offset into its segments. The block dimension is 0 on CPU (``[blocks, heads, block, 2*dim]``)
    and 1 for CUDA flash-attention (``[2, blocks, block, heads, dim]``).
    """
    tensors = list(kv_caches.values())
    if not tensors:
        raise ValueError("register_kv_caches: no KV tensors")
    first = tensors[0]
    block_dim = 0 if first.device.type == "cpu" else 1
    logical = KVLayout.from_layer_tensors(tensors, block_dim)  # validates shapes and contiguity
    storages: dict[int, int] = {}
    bases: list[torch.Tensor] = []
    base_of: list[int] = []
    for t in tensors:
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in storages:
            storages[key] = len(bases)
            bases.append(torch.empty(0, dtype=torch.uint8, device=t.device).set_(st))
        base_of.append(storages[key])
    segments = [
        Segment(base_of[seg.base], seg.offset + tensors[seg.base].storage_offset() * tensors[seg.base].element_size(),
                seg.stride, seg.nbytes, seg.host_offset)
        for seg in logical.segments
    ]
    return KVLayout(bases, segments, logical.num_blocks)


class KVWorker:
    """Byte movement for one worker (one device)."""

    def __init__(self, host_blocks: int, backend: str = "auto") -> None:
        self.host_blocks = int(host_blocks)
        self.backend = backend
        self.engine: DuplexKVEngine | None = None
        self.stats: collections.Counter[str] = collections.Counter()
        self._syncs: collections.deque[tuple[int, Ticket, frozenset[str]]] = collections.deque()
        self._loading: dict[str, Ticket] = {}
        self._finished_recving: set[str] = set()
        self._load_errors: set[int] = set()
        self._failed: list[str] = []
        self._last_step = 0

    def register(self, kv_caches: dict[str, torch.Tensor]) -> None:
        layout = storage_layout(kv_caches)
        # On a CPU engine copies run inline: worker threads there slow every step (superinfer.duplexkv.executor)
        inline = InlineExecutor if layout.device.type == "cpu" else None
        self.engine = DuplexKVEngine(layout, self.host_blocks, backend=self.backend, executor=inline)
        log.info("DuplexKV worker: %r, host pool %d blocks (%d bytes each)", self.engine.layout, self.host_blocks,
                 self.engine.layout.block_bytes)

    # -- step hooks ------------------------------------------------------------------------------
    def handle_preemptions(self, meta: DuplexKVMeta) -> None:
        eng = self._engine()
        self._last_step = meta.step
        if meta.drops:
            drops = set(meta.drops)
            for _, ticket, reqs in self._syncs:
                if reqs & drops:
                    self._wait(ticket)
            for rid in meta.drops:
                load = self._loading.pop(rid, None)
                if load is not None:
                    self._wait(load)
                    self._finished_recving.add(rid)  # vLLM holds an aborted load's blocks until reported
                eng.free_request(rid)
            self.stats["dropped"] += len(meta.drops)
        if meta.swap_outs:
            t0 = time.perf_counter_ns()
            plan = TransferPlan()
            for rid, blocks, full in meta.swap_outs:
                plan.swap_out(rid, blocks, full)
            try:
                ticket = eng.submit(plan)
            except DuplexKVError as exc:  # HostPoolFull or PlanError: the ledger and the pool disagree
                log.error("DuplexKV: parking %d request(s) failed, they will be recomputed: %s",
                          len(meta.swap_outs), exc)
                self._failed.extend(rid for rid, _, _ in meta.swap_outs)
                self.stats["park_failures"] += len(meta.swap_outs)
            else:
                try:
                    self._wait(ticket)  # this step may already reuse the victims' device blocks
                except DuplexKVError as exc:
                    log.error("DuplexKV: parking copy failed, %d request(s) will be recomputed: %s",
                              len(meta.swap_outs), exc)
                    self._failed.extend(rid for rid, _, _ in meta.swap_outs)
                    self.stats["park_failures"] += len(meta.swap_outs)
                eng.take_released()
                self.stats["parked"] += len(meta.swap_outs)
                self.stats["d2h_bytes"] += ticket.bytes_d2h
                self._time("park", ticket.bytes_d2h, t0)

    def start_load(self, meta: DuplexKVMeta) -> None:
        if not meta.loads:
            return
        eng = self._engine()
        for rid, blocks, is_async in meta.loads:
            t0 = time.perf_counter_ns()
            try:
                ticket = eng.submit(TransferPlan().swap_in(rid, blocks))
            except DuplexKVError as exc:
                log.error("DuplexKV: loading request %s failed, it will be recomputed: %s", rid, exc)
                self._load_errors.update(blocks)  # vLLM recomputes from the first of them, on every rank
                self.stats["load_failures"] += 1
                # This rank's partly filled tail copy was not marked stale (only a load does that); forget the
                # request's host copies here so the next park copies every block afresh (the ledger's host
                # block count stays an upper bound of what this rank holds until then).
                eng.free_request(rid)
                if is_async:
                    self._finished_recving.add(rid)
                continue
            self.stats["loads"] += 1
            self.stats["h2d_bytes"] += ticket.bytes_h2d
            if is_async:
                self._loading[rid] = ticket
            else:
                self._wait(ticket)
            self._time("load", ticket.bytes_h2d, t0)

    def save(self, meta: DuplexKVMeta) -> None:
        if not meta.syncs:
            return
        t0 = time.perf_counter_ns()
        plan = TransferPlan()
        for rid, index, dev in meta.syncs:
            plan.sync(rid, index, dev)
        try:
            ticket = self._engine().submit(plan)
        except DuplexKVError as exc:
            # A failed eager sync loses nothing: the blocks are still on the device and a later swap-out
            # copies them. The scheduler never hears "synced" for them (the step is not reported done).
            log.error("DuplexKV: eager sync of %d block(s) refused: %s", len(meta.syncs), exc)
            self.stats["sync_failures"] += 1
            return
        self.stats["synced_blocks"] += len(meta.syncs)
        self._syncs.append((meta.step, ticket, frozenset(rid for rid, _, _ in meta.syncs)))
        self._time("sync", ticket.bytes_d2h, t0)

    def get_finished(self) -> tuple[set[str] | None, set[str] | None]:
        for rid, ticket in list(self._loading.items()):
            if ticket.done():
                del self._loading[rid]
                if ticket.error is not None:
                    log.error("DuplexKV: async load of %s failed: %s", rid, ticket.error)
                self._finished_recving.add(rid)
        if not self._finished_recving:
            return None, None
        done, self._finished_recving = self._finished_recving, set()
        return None, done

    def load_errors(self) -> set[int]:
        out, self._load_errors = self._load_errors, set()
        return out

    def report(self) -> DuplexKVWorkerMeta:
        """Which steps' eager syncs have completed (in order), and which parks failed."""
        if self.engine is not None:
            self.engine.poll()
        done = self._last_step
        while self._syncs:
            step, ticket, _ = self._syncs[0]
            if not ticket.done():
                done = step - 1
                break
            self._syncs.popleft()
        failed, self._failed = self._failed, []
        return DuplexKVWorkerMeta(done, failed)

    def close(self) -> None:
        if self.engine is not None:
            for _, ticket, _ in self._syncs:
                self._wait(ticket)
            for ticket in self._loading.values():
                self._wait(ticket)
            self.engine.poll()
            CLOSED.append({"pool_free": self.engine.pool.free_blocks, "pool_blocks": self.engine.pool.num_blocks,
                           "requests_with_host_blocks": len({k[0] for k in self.engine._state.host_of}),
                           **self.stats})
            self.engine.close()
            self.engine = None

    # -- helpers -----------------------------------------------------------------------------------
    def _time(self, kind: str, nbytes: int, t0_ns: int) -> None:
        """Add one timed operation that copied ``nbytes`` to the ``kind`` sums (module docstring)."""
        ns = time.perf_counter_ns() - t0_ns
        blocks = nbytes // self._engine().layout.block_bytes
        if blocks <= 0:
            return  # nothing copied: bookkeeping only, not the connector's copy cost
        st = self.stats
        st[kind + "_n"] += 1
        st[kind + "_x"] += blocks
        st[kind + "_xx"] += blocks * blocks
        st[kind + "_ns"] += ns
        st[kind + "_ns_x"] += ns * blocks

    def _engine(self) -> DuplexKVEngine:
        if self.engine is None:
            raise RuntimeError("DuplexKVConnector: register_kv_caches was not called before the first step")
        return self.engine

    def _wait(self, ticket: Ticket) -> None:
        self._engine().wait(ticket)

    def pool_free(self) -> int:
        return self._engine().pool.free_blocks

    def snapshot_stats(self) -> dict[str, Any]:
        return dict(self.stats)
