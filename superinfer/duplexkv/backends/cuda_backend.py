"""Copy-engine backend for CUDA: one ``cudaMemcpyBatchAsync`` per batch on the executor's stream.

``cudaMemcpyBatchAsync`` (CUDA >= 12.8) submits every row of the batch in one call, executed by the DMA
copy engines so it leaves the SMs to compute. Its Python binding comes from ``cuda.bindings`` (or the older
``cuda.cudart``); CUDA 12.8/12.9 bindings return ``(err, failIdx)``, CUDA 13 removed ``failIdx`` and returns
``(err,)``; both are accepted. When the binding or the driver entry point is missing, the batch falls back
to one non-blocking ``copy_`` per row on the same stream (still asynchronous from pinned memory).
The API rejects the legacy NULL stream: the engine's streams are always created ones.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from superinfer.duplexkv.backends.base import base_pointers
from superinfer.duplexkv.backends.torch_backend import TorchBackend
from superinfer.duplexkv.errors import BackendUnavailable, TransferError
from superinfer.duplexkv.merge import expand_rows

log = logging.getLogger(__name__)


def _load_cudart() -> Any | None:
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            module = __import__(name, fromlist=["_"])
        except ImportError:
            continue
        if hasattr(module, "cudaMemcpyBatchAsync") and hasattr(module, "cudaMemcpyAttributes"):
            return module
    return None


class CudaBackend:
    name = "cuda"

    def __init__(self, use_batch_api: bool = True) -> None:
        if not torch.cuda.is_available():
            raise BackendUnavailable("the cuda backend needs a CUDA device")
        self._cudart = _load_cudart() if use_batch_api else None
        self._attr = None
        if self._cudart is not None:
            attr = self._cudart.cudaMemcpyAttributes()
            attr.srcAccessOrder = self._cudart.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream
            flag = getattr(self._cudart.cudaMemcpyFlags, "cudaMemcpyFlagPreferOverlapWithCompute", None)
            if flag is not None:
                attr.flags = flag
            self._attr = attr
        self._fallback = TorchBackend()
        self._ptrs = np.zeros(0, dtype=np.int64)

    @property
    def batched(self) -> bool:
        """True when copies go through ``cudaMemcpyBatchAsync``."""
        return self._cudart is not None

    def bind(self, bases: Sequence[torch.Tensor]) -> None:
        self._fallback.bind(bases)
        self._ptrs = base_pointers(bases)

    def run(self, ops: np.ndarray, stream: Any = None) -> Any:
        if self._cudart is None:
            return self._fallback.run(ops, stream)
        src, dst, size = expand_rows(ops, self._ptrs)
        if size.size == 0:
            return None
        handle = (stream or torch.cuda.current_stream()).cuda_stream
        if handle == 0:
            raise TransferError("cudaMemcpyBatchAsync cannot use the legacy NULL stream")
        try:
            result = self._cudart.cudaMemcpyBatchAsync(
                dst.tolist(), src.tolist(), size.tolist(), int(size.size), [self._attr], [0], 1, handle
            )
        except TypeError as exc:  # a binding with another signature: nothing was enqueued
            log.warning("cudaMemcpyBatchAsync binding not usable (%s); using copy_", exc)
            self._cudart = None
            return self._fallback.run(ops, stream)
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            log.warning("cudaMemcpyBatchAsync failed (%s); falling back to copy_ for the rest of the run", result)
            self._cudart = None
            return self._fallback.run(ops, stream)
        return None
