"""Reference backend: one ``Tensor.copy_`` per operation (CPU and CUDA).

On CPU a strided 2-D operation is a single strided ``copy_``. Across devices torch would first make a
strided source contiguous with an extra synchronous copy, so there the rows are copied one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


class TorchBackend:
    name = "torch"

    def __init__(self) -> None:
        self._bases: tuple[torch.Tensor, ...] = ()
        self._cross_device = False

    def bind(self, bases: Sequence[torch.Tensor]) -> None:
        self._bases = tuple(bases)
        self._cross_device = len({b.device for b in self._bases}) > 1

    def run(self, ops: np.ndarray, stream: Any = None) -> Any:
        bases = self._bases
        non_blocking = self._cross_device
        for src, so, ss, dst, do, ds, row, rows in ops.tolist():
            s, d = bases[src], bases[dst]
            if rows == 1:
                d[do : do + row].copy_(s[so : so + row], non_blocking=non_blocking)
            elif self._cross_device:
                for r in range(rows):
                    d[do + r * ds : do + r * ds + row].copy_(s[so + r * ss : so + r * ss + row], non_blocking=True)
            else:
                # as_strided's offset counts from the start of the *storage*: add where the base view
                # begins (vLLM's per-layer KV tensors are views into one shared allocation).
                d.as_strided((rows, row), (ds, 1), d.storage_offset() + do).copy_(
                    s.as_strided((rows, row), (ss, 1), s.storage_offset() + so))
        return None
