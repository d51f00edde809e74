"""DuplexKV: submit a transfer plan, get a ticket, poll or wait (design §4).

One ``submit`` turns a :class:`TransferPlan` into at most one batch per direction per wave (normally
exactly one batch per direction: waves only appear when a plan contains dependent copies, rule 6). Each
batch is merged over adjacent block runs (``merge.py``) and handed to the executor with the dependencies
the ordering rules (``rules.py``) computed. The engine holds one lock; executors never call back into it:
completions are observed by ``poll``/``wait``/``readable`` (``TransferState.reap``).

Invariants: a host block is owned by exactly one (request, index); a plan that needs more host blocks than
are free raises :class:`HostPoolFull` before anything is allocated or launched; a device block is listed
in ``take_released()`` only after no pending copy reads it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from superinfer.duplexkv import rules
from superinfer.duplexkv.backends import CopyBackend, make_backend
from superinfer.duplexkv.errors import PlanError, TransferError
from superinfer.duplexkv.executor import Executor, default_executor
from superinfer.duplexkv.fences import Fence, Handle
from superinfer.duplexkv.layout import KVLayout
from superinfer.duplexkv.merge import Direction, merged_ops, naive_ops, total_bytes
from superinfer.duplexkv.plan import SwapIn, SwapOut, Sync, Ticket, TransferPlan
from superinfer.duplexkv.pool import HostPool
from superinfer.duplexkv.state import Key, TransferState
from superinfer.duplexkv.stats import TransferStats

log = logging.getLogger(__name__)


@dataclass
class _Copy:
    direction: Direction
    dev: int
    host: int
    deps: list[Fence]
    after: Callable[[Handle], None] | None = None
    handle: Handle | None = None


class DuplexKVEngine:
    """The KV transfer engine over one device KV layout and one host pool.

    ``backend``: ``auto`` | ``torch`` | ``triton`` | ``cuda`` or a backend object. ``executor``: a factory
    ``backend -> Executor`` (default: CUDA streams on GPU, worker threads on CPU). ``merge=False`` copies
    segment by segment (the naive baseline); ``max_unit_bytes`` caps one merged copy.
    """

    def __init__(
        self,
        layout: KVLayout,
        host_blocks: int,
        *,
        backend: str | CopyBackend = "auto",
        executor: Callable[[CopyBackend], Executor] | None = None,
        merge: bool = True,
        max_unit_bytes: int | None = None,
        pin: bool | None = None,
    ) -> None:
        self.layout = layout
        self.pool = HostPool(host_blocks, layout.block_bytes, pin=pin if layout.device.type == "cuda" else False)
        self.backend = make_backend(backend, layout.device) if isinstance(backend, str) else backend
        self.backend.bind([self.pool.tensor, *layout.bases])
        self.executor = executor(self.backend) if executor is not None else default_executor(self.backend, layout.device)
        self.merge = merge
        self.max_unit_bytes = max_unit_bytes
        self.stats = TransferStats()
        self._state = TransferState()
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._tickets: dict[int, Ticket] = {}
        self._deferred_free: list[int] = []

    # -- submit ------------------------------------------------------------------------------------
    def submit(self, plan: TransferPlan) -> Ticket:
        """Validate, allocate host blocks, order and launch a plan. Raises HostPoolFull or PlanError."""
        with self._lock:
            self._reap()
            st = self._state
            self._validate(plan)
            new_keys = self._keys_needing_host(plan)
            for key, host in zip(new_keys, self.pool.allocate(len(new_keys))):
                st.host_of[key] = host
            copies: list[_Copy] = []
            adopted: list[Handle] = []
            releases: list[tuple[int, _Copy | Handle | None]] = []
            skipped = 0
            planned_sync: dict[Key, _Copy] = {}
            for item in plan.items:
                if isinstance(item, Sync):
                    key = (item.req_id, item.index)
                    if key in st.synced or key in st.sync_inflight or key in planned_sync:
                        skipped += 1
                        continue
                    planned_sync[key] = self._d2h(copies, key, item.dev_block)
                elif isinstance(item, SwapOut):
                    for i, dev in enumerate(item.dev_blocks):
                        key = (item.req_id, i)
                        if i >= item.num_full:
                            st.partial.add(key)
                        if key in st.synced:
                            skipped += 1
                            releases.append((dev, None))
                        elif key in st.sync_inflight:
                            skipped += 1
                            adopted.append(st.sync_inflight[key])
                            releases.append((dev, st.sync_inflight[key]))
                        elif key in planned_sync:
                            skipped += 1
                            releases.append((dev, planned_sync[key]))
                        else:
                            releases.append((dev, self._d2h(copies, key, dev)))
                else:
                    for i, dev in enumerate(item.dev_blocks):
                        key = (item.req_id, i)
                        host = st.host_of[key]
                        skip, deps = rules.h2d_after_pending_d2h(st, host, dev)
                        if skip:
                            skipped += 1
                            continue
                        deps += rules.wait_copy_out_before_overwrite(st, dev)
                        copies.append(_Copy(Direction.H2D, dev, host, deps, self._after_h2d(key, dev, host)))
            handles = self._launch(copies)
            for dev, src in releases:
                handle = src.handle if isinstance(src, _Copy) else src
                rules.release_after_copy_out(st, dev, handle)
            ticket = Ticket(
                id=next(self._ids),
                handles=handles + adopted,
                released=tuple(dev for dev, _ in releases),
                bytes_h2d=sum(h.nbytes for h in handles if h.direction is Direction.H2D),
                bytes_d2h=sum(h.nbytes for h in handles if h.direction is Direction.D2H),
                skipped=skipped,
            )
            self._tickets[ticket.id] = ticket
            log.debug("ticket %d: %d copies, %d skipped", ticket.id, len(copies), skipped)
            return ticket

    def _validate(self, plan: TransferPlan) -> None:
        st = self._state
        nb = self.layout.num_blocks
        for item in plan.items:
            devs = (item.dev_block,) if isinstance(item, Sync) else item.dev_blocks
            bad = [d for d in devs if not (0 <= d < nb)]
            if bad:
                raise PlanError(f"{type(item).__name__} of {item.req_id!r}: device blocks {bad} outside [0, {nb})")
            if isinstance(item, Sync) and item.index < 0:
                raise PlanError(f"sync of {item.req_id!r}: negative block index {item.index}")
            if isinstance(item, SwapIn):
                missing = [
                    i for i in range(len(item.dev_blocks))
                    if (item.req_id, i) not in st.synced
                    and (item.req_id, i) not in st.sync_inflight
                    and not self._planned_before(plan, item, (item.req_id, i))
                ]
                if missing:
                    raise PlanError(f"swap-in of {item.req_id!r}: no host copy of block(s) {missing}")
            if len(set(devs)) != len(devs):
                raise PlanError(f"{type(item).__name__} of {item.req_id!r}: repeated device block")

    @staticmethod
    def _planned_before(plan: TransferPlan, until: object, key: Key) -> bool:
        for item in plan.items:
            if item is until:
                return False
            if isinstance(item, Sync) and (item.req_id, item.index) == key:
                return True
            if isinstance(item, SwapOut) and item.req_id == key[0] and key[1] < len(item.dev_blocks):
                return True
        return False

    def _keys_needing_host(self, plan: TransferPlan) -> list[Key]:
        keys: dict[Key, None] = {}
        for item in plan.items:
            if isinstance(item, Sync):
                candidates = [(item.req_id, item.index)]
            elif isinstance(item, SwapOut):
                candidates = [(item.req_id, i) for i in range(len(item.dev_blocks))]
            else:
                continue
            for key in candidates:
                if key not in self._state.host_of:
                    keys[key] = None
        return list(keys)

    def _d2h(self, copies: list[_Copy], key: Key, dev: int) -> _Copy:
        st = self._state
        host = st.host_of[key]
        deps = rules.d2h_after_writer(st, dev) + rules.d2h_after_pending_h2d(st, host)

        def after(handle: Handle) -> None:
            rules.mark_synced_on_completion(st, key, handle)
            st.d2h_by_host[host] = (handle, dev)
            st.on_done(handle, lambda: st.d2h_by_host.get(host, (None,))[0] is handle and st.d2h_by_host.pop(host))

        copy = _Copy(Direction.D2H, dev, host, deps, after)
        copies.append(copy)
        return copy

    def _after_h2d(self, key: Key, dev: int, host: int) -> Callable[[Handle], None]:
        st = self._state

        def after(handle: Handle) -> None:
            st.h2d_by_dev[dev] = handle
            st.h2d_by_host[host] = handle
            if key in st.partial:  # the resumed request appends to this block: its host copy goes stale
                st.partial.discard(key)
                st.synced.discard(key)

            def done() -> None:
                if st.h2d_by_dev.get(dev) is handle:
                    del st.h2d_by_dev[dev]
                if st.h2d_by_host.get(host) is handle:
                    del st.h2d_by_host[host]

            st.on_done(handle, done)

        return after

    def _launch(self, copies: list[_Copy]) -> list[Handle]:
        if not copies:
            return []
        waves = rules.assign_waves([(c.direction, c.dev, c.host) for c in copies])
        handles: list[Handle] = []
        previous: list[Handle] = []
        for wave in range(max(waves) + 1):
            current: list[Handle] = []
            for direction in (Direction.D2H, Direction.H2D):
                group = [c for c, w in zip(copies, waves) if w == wave and c.direction is direction]
                if not group:
                    continue
                dev = np.fromiter((c.dev for c in group), np.int64, len(group))
                host = np.fromiter((c.host for c in group), np.int64, len(group))
                if self.merge:
                    ops = merged_ops(self.layout, dev, host, direction, self.pool.num_blocks, self.max_unit_bytes)
                else:
                    ops = naive_ops(self.layout, dev, host, direction, self.pool.num_blocks)
                deps = _unique(previous + [d for c in group for d in c.deps])
                handle = self.executor.launch(direction, ops, total_bytes(ops), deps)
                self._state.on_done(handle, lambda h=handle: self._account(h))
                for c in group:
                    c.handle = handle
                    if c.after is not None:
                        c.after(handle)
                current.append(handle)
            handles += current
            previous = current
        return handles

    def _account(self, handle: Handle) -> None:
        if handle.error is None:
            self.stats.add(handle.direction, handle.nbytes, handle.elapsed_s, handle.ops)

    # -- completion --------------------------------------------------------------------------------
    def _reap(self) -> None:
        self._state.reap()
        if self._deferred_free:
            pending, self._deferred_free = self._deferred_free, []
            self._release_host(pending)

    def poll(self) -> list[Ticket]:
        """Tickets that completed since the last poll (completion effects applied)."""
        with self._lock:
            self._reap()
            done = [t for t in self._tickets.values() if t.done()]
            for t in done:
                del self._tickets[t.id]
            return done

    def wait(self, ticket: Ticket, timeout: float | None = None) -> Ticket:
        """Block until ``ticket`` completes; raises TransferError if one of its copies failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for h in ticket.handles:
            h.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._reap()
        if ticket.error is not None:
            raise TransferError(f"ticket {ticket.id} failed: {ticket.error}") from ticket.error
        return ticket

    def take_released(self) -> list[int]:
        """Device blocks whose copy-out completed since the last call: safe to reuse (rule 2)."""
        with self._lock:
            self._reap()
            out, self._state.released = self._state.released, []
            return out

    # -- compute interplay (rules 4 and 5) ---------------------------------------------------------
    def record_compute(self, dev_blocks: Sequence[int], fence: Fence) -> None:
        """Compute that writes ``dev_blocks`` completes at ``fence``; later D2H copies wait for it (4)."""
        with self._lock:
            for d in dev_blocks:
                self._state.compute[int(d)] = fence

    def readable(self, dev_blocks: Sequence[int]) -> bool:
        """True when compute may read ``dev_blocks``: their swap-in copies completed (rule 5)."""
        with self._lock:
            self._reap()
            return all(rules.readable(self._state, int(d)) for d in dev_blocks)

    def read_fences(self, dev_blocks: Sequence[int]) -> list[Fence]:
        """Fences a compute stream must wait on before reading ``dev_blocks`` (rule 5)."""
        with self._lock:
            self._reap()
            return _unique([f for d in dev_blocks for f in rules.read_fences(self._state, int(d))])

    # -- state queries -----------------------------------------------------------------------------
    def is_synced(self, req_id: Hashable, index: int) -> bool:
        with self._lock:
            self._reap()
            return (req_id, index) in self._state.synced

    def unsynced(self, req_id: Hashable, num_blocks: int) -> list[int]:
        """Block indices a swap-out of ``req_id`` would still have to copy (the unsynced tail)."""
        with self._lock:
            self._reap()
            return [i for i in range(num_blocks) if (req_id, i) not in self._state.synced]

    def host_block(self, req_id: Hashable, index: int) -> int:
        with self._lock:
            key = (req_id, index)
            if key not in self._state.host_of:
                raise KeyError(f"no host block for {key}")
            return self._state.host_of[key]

    # -- lifecycle ---------------------------------------------------------------------------------
    def free_request(self, req_id: Hashable) -> None:
        """Forget a finished request; its host blocks return to the pool once no copy touches them."""
        with self._lock:
            st = self._state
            keys = [k for k in st.host_of if k[0] == req_id]
            hosts = [st.host_of.pop(k) for k in keys]
            for k in keys:
                st.synced.discard(k)
                st.partial.discard(k)
            self._release_host(hosts)

    def _release_host(self, hosts: list[int]) -> None:
        st = self._state
        busy = [h for h in hosts if st.pending(st.d2h_by_host.get(h, (None,))[0]) or st.pending(st.h2d_by_host.get(h))]
        free = [h for h in hosts if h not in busy]
        self._deferred_free.extend(busy)
        if free:
            self.pool.free(free)

    def close(self) -> None:
        self.executor.close()
        self.pool.close()


def _unique(fences: list[Fence]) -> list[Fence]:
    seen: dict[int, Fence] = {}
    for f in fences:
        seen.setdefault(id(f), f)
    return list(seen.values())
