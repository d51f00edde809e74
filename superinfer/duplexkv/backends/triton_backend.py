"""Merged gather/scatter kernel: one Triton launch copies a whole batch.

The batch is flattened into jobs ``(src_addr, dst_addr, nbytes)`` (raw addresses, so one launch spans
the host pool and every layer tensor); a persistent grid of programs walks the jobs. When every address
and size is a multiple of 8 the kernel moves int64 words, otherwise bytes. Only basic ``tl`` operations
are used (the GPU image has triton 3.6).

On a host without CUDA the kernel runs in Triton's interpreter: if ``TRITON_INTERPRET=1`` is set when this
module is imported, ``triton.jit`` already returns an interpreted function; otherwise the kernel is wrapped
in the interpreter explicitly, so importing this module never changes the process environment. The
interpreter is not thread-safe: every interpreted launch holds ``_INTERPRETER_LOCK``. It costs about
1 ms per program, so it is for correctness on KB-sized data, not for speed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from superinfer.duplexkv.backends.base import base_pointers
from superinfer.duplexkv.errors import BackendUnavailable
from superinfer.duplexkv.merge import expand_rows

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - triton ships with torch/vLLM here
    raise BackendUnavailable(f"triton is not importable: {exc}") from exc

_INTERPRETER_LOCK = threading.Lock()
_ENV_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _copy_jobs(src_addrs, dst_addrs, sizes, n_jobs, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    job = pid
    while job < n_jobs:
        if WIDE:
            src = tl.load(src_addrs + job).to(tl.pointer_type(tl.int64))
            dst = tl.load(dst_addrs + job).to(tl.pointer_type(tl.int64))
            n = tl.load(sizes + job) // 8
        else:
            src = tl.load(src_addrs + job).to(tl.pointer_type(tl.uint8))
            dst = tl.load(dst_addrs + job).to(tl.pointer_type(tl.uint8))
            n = tl.load(sizes + job)
        # a while loop, not range(0, n, BLOCK): triton 3.6's interpreter turns a loaded n into a Python int
        # through a one-element array, which NumPy >= 2.5 refuses (seen on the lent H200's image)
        start = 0
        while start < n:
            idx = start + offs
            mask = idx < n
            tl.store(dst + idx, tl.load(src + idx, mask=mask), mask=mask)
            start += BLOCK
        job += nprog


_jitted = triton.jit(_copy_jobs)
_interpreted = _jitted if _ENV_INTERPRET else None


def _interpreted_kernel():
    global _interpreted
    if _interpreted is None:
        from triton.runtime.interpreter import InterpretedFunction

        _interpreted = InterpretedFunction(_copy_jobs)
    return _interpreted


class TritonBackend:
    """``max_job_bytes`` cuts long copies so many programs share them; ``programs`` caps the grid."""

    name = "triton"

    def __init__(self, max_job_bytes: int = 1 << 20, programs: int | None = None, block: int | None = None) -> None:
        if max_job_bytes <= 0 or max_job_bytes % 8:
            raise ValueError(f"max_job_bytes must be a positive multiple of 8, got {max_job_bytes}")
        self.max_job_bytes = max_job_bytes
        self._programs = programs
        self._block = block
        self._ptrs = np.zeros(0, dtype=np.int64)
        self._device = torch.device("cpu")
        self.interpreted = True

    def bind(self, bases: Sequence[torch.Tensor]) -> None:
        devices = {b.device for b in bases}
        cuda = [d for d in devices if d.type == "cuda"]
        self._device = cuda[0] if cuda else torch.device("cpu")
        self.interpreted = _ENV_INTERPRET or not cuda
        if not self.interpreted:
            host = [b for b in bases if b.device.type == "cpu"]
            if any(not _is_pinned(b) for b in host):
                raise BackendUnavailable("the triton backend reads host memory from the GPU: the host pool must be pinned")
        self._ptrs = base_pointers(bases)

    def _grid_and_block(self, n_jobs: int) -> tuple[int, int]:
        if self.interpreted:
            return min(n_jobs, self._programs or 4), self._block or 4096
        programs = self._programs or 4 * torch.cuda.get_device_properties(self._device).multi_processor_count
        return min(n_jobs, programs), self._block or 4096

    def run(self, ops: np.ndarray, stream: Any = None) -> Any:
        src, dst, size = expand_rows(ops, self._ptrs, self.max_job_bytes)
        n = int(size.size)
        if n == 0:
            return None
        wide = bool(((src | dst | size) & 7).max() == 0)
        grid, block = self._grid_and_block(n)
        desc = torch.from_numpy(np.stack([src, dst, size]))
        if self.interpreted:
            with _INTERPRETER_LOCK:
                _interpreted_kernel()[(grid,)](desc[0], desc[1], desc[2], n, BLOCK=block, WIDE=wide)
            return None
        staged = desc.pin_memory()
        on_dev = staged.to(self._device, non_blocking=True)
        _jitted[(grid,)](on_dev[0], on_dev[1], on_dev[2], n, BLOCK=block, WIDE=wide, num_warps=8)
        return (staged, on_dev)


def _is_pinned(t: torch.Tensor) -> bool:
    if t.is_pinned():
        return True
    # registered with cudaHostRegister (pinned.register): ask the runtime about the pointer
    try:
        from superinfer.duplexkv.pinned import is_registered

        return is_registered(t)
    except Exception:  # noqa: BLE001 - best effort; an unpinned pool is reported as such
        return False
