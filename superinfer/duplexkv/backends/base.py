"""The copy-backend interface: execute one batch of copy operations over a bound memory map.

A backend is bound once to the memory map (base 0 = host pool, base 1.. = device KV tensors, see
``superinfer.duplexkv.merge``) and then runs op tables. ``run`` enqueues the copies on ``stream`` (CUDA) or
performs them before returning (CPU); it returns whatever must stay alive until the copies complete.
Operations inside one batch are independent (rule 6 is enforced before a batch is formed), so a backend
may execute them in any order or in parallel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch


@runtime_checkable
class CopyBackend(Protocol):
    name: str

    def bind(self, bases: Sequence[torch.Tensor]) -> None: ...

    def run(self, ops: np.ndarray, stream: Any = None) -> Any: ...


def base_pointers(bases: Sequence[torch.Tensor]) -> np.ndarray:
    """Addresses of the bases, as an int64 array indexed like the op tables."""
    return np.array([b.data_ptr() for b in bases], dtype=np.int64)
