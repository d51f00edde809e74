"""What the scheduler asks for in one iteration, and what it gets back.

A :class:`TransferPlan` lists, in order, eager syncs of blocks that just filled, swap-outs of preempted
requests and swap-ins of resumed ones, all in terms of (request, logical block index, device block id);
host block ids are the engine's business. ``DuplexKVEngine.submit(plan)`` returns a :class:`Ticket`;
``poll()``/``wait()`` report completion (the two-phase shape of vLLM's ``kv_offload`` API).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from superinfer.duplexkv.fences import Handle

RequestId = Hashable


@dataclass(frozen=True)
class Sync:
    req_id: RequestId
    index: int
    dev_block: int


@dataclass(frozen=True)
class SwapOut:
    req_id: RequestId
    dev_blocks: tuple[int, ...]
    num_full: int  # blocks [num_full:] are partly filled: copied, but stale once the request resumes


@dataclass(frozen=True)
class SwapIn:
    req_id: RequestId
    dev_blocks: tuple[int, ...]


@dataclass
class TransferPlan:
    """An ordered list of transfer requests; build it with the chaining helpers."""

    items: list[Sync | SwapOut | SwapIn] = field(default_factory=list)

    def sync(self, req_id: RequestId, index: int, dev_block: int) -> "TransferPlan":
        """Eager sync: block ``index`` of ``req_id`` (in ``dev_block``) is full; copy it to the host."""
        self.items.append(Sync(req_id, int(index), int(dev_block)))
        return self

    def swap_out(self, req_id: RequestId, dev_blocks: Sequence[int], num_full: int | None = None) -> "TransferPlan":
        """Preempt: park all of ``req_id``'s blocks (index i lives in ``dev_blocks[i]``) on the host."""
        blocks = tuple(int(b) for b in dev_blocks)
        full = len(blocks) if num_full is None else int(num_full)
        if not (0 <= full <= len(blocks)):
            raise ValueError(f"num_full={full} outside [0, {len(blocks)}]")
        self.items.append(SwapOut(req_id, blocks, full))
        return self

    def swap_in(self, req_id: RequestId, dev_blocks: Sequence[int]) -> "TransferPlan":
        """Resume: copy ``req_id``'s parked blocks into ``dev_blocks`` (index i into ``dev_blocks[i]``)."""
        self.items.append(SwapIn(req_id, tuple(int(b) for b in dev_blocks)))
        return self

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class Ticket:
    """A submitted plan. ``handles``: batches it launched or adopted; ``released``: device blocks it frees."""

    id: int
    handles: list[Handle]
    released: tuple[int, ...]
    bytes_h2d: int
    bytes_d2h: int
    skipped: int  # copies not needed: already synced, or cancelled by rule 3

    def done(self) -> bool:
        return all(h.done() for h in self.handles)

    @property
    def error(self) -> BaseException | None:
        return next((h.error for h in self.handles if h.done() and h.error is not None), None)
