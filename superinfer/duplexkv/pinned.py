"""Page-locking an existing host tensor with ``cudaHostRegister`` in chunks (design §4).

``pin_memory=True`` rounds allocations up to a power of two and one registration of >= 512 GiB fails on
recent drivers, so the pool is allocated as a plain tensor and registered in chunks of at most 64 GiB
(about 0.1 s/GB). Every return code is checked; on failure the chunks already registered are released
again and :class:`PinnedMemoryError` is raised. Without CUDA this is a no-op: host copies on a CPU-only
machine are plain memcpy and pinning means nothing there.
"""

from __future__ import annotations

import logging

import torch

from superinfer.duplexkv.errors import PinnedMemoryError

log = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 64 << 30
CUDA_HOST_REGISTER_DEFAULT = 0

_registered: dict[int, int] = {}  # chunk address -> bytes, for is_registered()


class PinnedRegion:
    """The registered chunks of one tensor; ``unregister()`` releases them (idempotent)."""

    def __init__(self, tensor: torch.Tensor, chunks: list[tuple[int, int]]) -> None:
        self.tensor = tensor
        self.chunks = chunks

    @property
    def pinned(self) -> bool:
        return bool(self.chunks)

    def unregister(self) -> None:
        cudart = torch.cuda.cudart() if self.chunks else None
        while self.chunks:
            ptr, nbytes = self.chunks.pop()
            code = int(cudart.cudaHostUnregister(ptr))
            _registered.pop(ptr, None)
            if code != 0:
                raise PinnedMemoryError("cudaHostUnregister", code, ptr - self.tensor.data_ptr(), nbytes)


def register(tensor: torch.Tensor, chunk_bytes: int = MAX_CHUNK_BYTES) -> PinnedRegion:
    """Page-lock ``tensor`` (CPU, contiguous) for asynchronous DMA; no-op when CUDA is unavailable."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        raise ValueError("only a contiguous CPU tensor can be registered as pinned memory")
    if not (0 < chunk_bytes <= MAX_CHUNK_BYTES):
        raise ValueError(f"chunk_bytes must be in (0, {MAX_CHUNK_BYTES}], got {chunk_bytes}")
    if not torch.cuda.is_available():
        return PinnedRegion(tensor, [])
    if tensor.is_pinned():
        return PinnedRegion(tensor, [])
    cudart = torch.cuda.cudart()
    base = tensor.data_ptr()
    total = tensor.numel() * tensor.element_size()
    region = PinnedRegion(tensor, [])
    offset = 0
    while offset < total:
        nbytes = min(chunk_bytes, total - offset)
        code = int(cudart.cudaHostRegister(base + offset, nbytes, CUDA_HOST_REGISTER_DEFAULT))
        if code != 0:
            region.unregister()
            raise PinnedMemoryError("cudaHostRegister", code, offset, nbytes)
        region.chunks.append((base + offset, nbytes))
        _registered[base + offset] = nbytes
        offset += nbytes
    log.info("pinned %d bytes of host KV pool in %d chunk(s)", total, len(region.chunks))
    return region


def is_registered(tensor: torch.Tensor) -> bool:
    """True when all of ``tensor``'s bytes lie in chunks registered by :func:`register`."""
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    pos = start
    for ptr, nbytes in sorted(_registered.items()):
        if ptr <= pos < ptr + nbytes:
            pos = ptr + nbytes
            if pos >= end:
                return True
    return False
