"""The block-first host (DRAM) pool: one flat byte tensor and an allocator of block ids.

Invariants: a host block id is either free or owned by exactly one (request, block index) of the engine;
``allocate`` is all-or-nothing and raises :class:`HostPoolFull` instead of handing out a block that is in
use; ``free`` rejects ids that are not allocated (double free). The lowest free ids are handed out first
so that consecutive allocations form adjacent runs the merger can copy in one piece.
"""

from __future__ import annotations

import heapq
import threading

import torch

from superinfer.duplexkv import pinned
from superinfer.duplexkv.errors import HostPoolFull


class HostPool:
    """``num_blocks`` host blocks of ``block_bytes`` each, optionally page-locked."""

    def __init__(self, num_blocks: int, block_bytes: int, pin: bool | None = None) -> None:
        if num_blocks <= 0 or block_bytes <= 0:
            raise ValueError(f"host pool needs num_blocks > 0 and block_bytes > 0, got {num_blocks}, {block_bytes}")
        self.num_blocks = int(num_blocks)
        self.block_bytes = int(block_bytes)
        self.tensor = torch.empty(self.num_blocks * self.block_bytes, dtype=torch.uint8)
        want_pin = torch.cuda.is_available() if pin is None else pin
        self._region = pinned.register(self.tensor) if want_pin else None
        self._free = list(range(self.num_blocks))
        heapq.heapify(self._free)
        self._used: set[int] = set()
        self._lock = threading.Lock()

    @property
    def pinned(self) -> bool:
        return bool(self._region and self._region.pinned) or self.tensor.is_pinned()

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """``n`` free block ids (lowest first). Raises HostPoolFull and allocates nothing if short."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        with self._lock:
            if n > len(self._free):
                raise HostPoolFull(n, len(self._free), self.num_blocks)
            ids = [heapq.heappop(self._free) for _ in range(n)]
            self._used.update(ids)
            return ids

    def free(self, ids: list[int]) -> None:
        """Return blocks to the pool. Raises ValueError on an id that is not allocated."""
        with self._lock:
            bad = [i for i in ids if i not in self._used]
            if bad or len(set(ids)) != len(ids):
                raise ValueError(f"freeing host blocks that are not allocated (or twice): {sorted(bad or ids)}")
            for i in ids:
                self._used.discard(i)
                heapq.heappush(self._free, i)

    def block(self, host_id: int) -> torch.Tensor:
        """The bytes of one host block (a view)."""
        if not (0 <= host_id < self.num_blocks):
            raise IndexError(f"host block {host_id} out of range [0, {self.num_blocks})")
        return self.tensor[host_id * self.block_bytes : (host_id + 1) * self.block_bytes]

    def close(self) -> None:
        """Unregister pinned memory (the tensor itself is freed by the garbage collector)."""
        if self._region is not None:
            self._region.unregister()
