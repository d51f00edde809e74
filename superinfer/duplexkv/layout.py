"""Byte layout of one KV block on the device and in the block-first host pool.

A *block* is all layers' K and V for ``block_size`` tokens. On the device a block may be scattered over
many *segments* (vLLM keeps one tensor per layer, K and V split inside it); in the host pool it is always
one contiguous run of ``block_bytes`` bytes, the segments laid end to end in layout order (design §4,
"block-first"). Segment ``s`` of device block ``b`` lives at bytes
``[offset + b * stride, offset + b * stride + nbytes)`` of device base tensor ``base``; in host block ``h``
it lives at ``[h * block_bytes + host_offset, ... + nbytes)``.

Invariants kept here: every base is a contiguous, flat ``uint8`` view of the caller's tensor (no copy,
the engine writes the caller's memory); segments of one block never overlap; the host offsets of the
segments tile ``[0, block_bytes)`` exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Segment:
    """One contiguous piece of every block: where block 0's piece starts, and the block stride."""

    base: int
    offset: int
    stride: int
    nbytes: int
    host_offset: int


def flat_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A flat ``uint8`` view sharing memory with ``tensor``. Raises ValueError if it is not contiguous."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError(f"KV tensor must be contiguous (shape {tuple(tensor.shape)}, strides {tensor.stride()})")
    if tensor.numel() == 0:
        raise ValueError("KV tensor is empty")
    return tensor.reshape(-1).view(torch.uint8)


def _fuse(segments: Sequence[Segment]) -> tuple[Segment, ...]:
    """Merge neighbouring segments that are contiguous on the device *and* in the host block."""
    fused: list[Segment] = []
    for seg in segments:
        if fused:
            last = fused[-1]
            if (
                seg.base == last.base
                and seg.stride == last.stride
                and seg.offset == last.offset + last.nbytes
                and seg.host_offset == last.host_offset + last.nbytes
            ):
                fused[-1] = Segment(last.base, last.offset, last.stride, last.nbytes + seg.nbytes, last.host_offset)
                continue
        fused.append(seg)
    return tuple(fused)


class KVLayout:
    """Views over device KV memory plus the segment map of one block.

    ``segments`` is the layout as the model stores it (one per layer and K/V: the naive copy unit);
    ``fused`` merges the ones that are adjacent on both sides (a block-first device tensor fuses to a
    single segment of ``block_bytes``).
    """

    def __init__(self, bases: Sequence[torch.Tensor], segments: Sequence[Segment], num_blocks: int) -> None:
        if not bases:
            raise ValueError("KVLayout needs at least one device tensor")
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be > 0, got {num_blocks}")
        devices = {b.device for b in bases}
        if len(devices) != 1:
            raise ValueError(f"all KV tensors must be on one device, got {sorted(map(str, devices))}")
        self.bases: tuple[torch.Tensor, ...] = tuple(flat_bytes(b) for b in bases)
        self.segments: tuple[Segment, ...] = tuple(segments)
        self.num_blocks = int(num_blocks)
        self.device: torch.device = next(iter(devices))
        expected = 0
        for seg in self.segments:
            if seg.host_offset != expected:
                raise ValueError(f"segment host offsets must tile the block; got {seg.host_offset}, expected {expected}")
            if seg.nbytes <= 0 or seg.stride < seg.nbytes:
                raise ValueError(f"segment {seg} has stride < size; blocks would overlap")
            end = seg.offset + (self.num_blocks - 1) * seg.stride + seg.nbytes
            if seg.base >= len(self.bases) or end > self.bases[seg.base].numel():
                raise ValueError(f"segment {seg} runs past its device tensor ({end} bytes needed)")
            expected += seg.nbytes
        self.block_bytes = expected
        self.fused: tuple[Segment, ...] = _fuse(self.segments)

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def block_first(cls, tensor: torch.Tensor, segments_per_block: int = 1) -> "KVLayout":
        """A device tensor shaped ``[num_blocks, ...]`` (vLLM's ``BLHNC``): every block is contiguous.

        ``segments_per_block`` splits each block into that many equal pieces (e.g. ``2 * num_layers``)
        so the naive per-segment copy can be measured on the same memory.
        """
        if tensor.dim() < 1:
            raise ValueError("block-first KV tensor needs a leading block dimension")
        num_blocks = tensor.shape[0]
        block_bytes = tensor[0].numel() * tensor.element_size() if num_blocks else 0
        if segments_per_block <= 0 or block_bytes % segments_per_block:
            raise ValueError(f"block of {block_bytes} bytes cannot be split into {segments_per_block} segments")
        seg = block_bytes // segments_per_block
        segments = [Segment(0, k * seg, block_bytes, seg, k * seg) for k in range(segments_per_block)]
        return cls([tensor], segments, num_blocks)

    @classmethod
    def from_layer_tensors(cls, tensors: Sequence[torch.Tensor], block_dim: int) -> "KVLayout":
        """One tensor per layer with the block index at dimension ``block_dim``.

        vLLM's CUDA flash-attention layout is ``[2, num_blocks, block_size, heads, head_dim]``
        (``block_dim=1``: a K and a V segment per layer); vLLM's CPU attention uses
        ``[num_blocks, heads, block_size, 2 * head_dim]`` (``block_dim=0``: one segment per layer).
        """
        if not tensors:
            raise ValueError("no layer tensors")
        shapes = {tuple(t.shape) for t in tensors}
        if any(t.dim() <= block_dim for t in tensors):
            raise ValueError(f"block_dim {block_dim} out of range for shapes {sorted(shapes)}")
        num_blocks = tensors[0].shape[block_dim]
        segments: list[Segment] = []
        host_offset = 0
        for i, t in enumerate(tensors):
            if t.shape[block_dim] != num_blocks:
                raise ValueError(f"layer {i} has {t.shape[block_dim]} blocks, layer 0 has {num_blocks}")
            inner = math.prod(t.shape[block_dim + 1 :]) * t.element_size()
            outer = math.prod(t.shape[:block_dim])
            for o in range(outer):
                segments.append(Segment(i, o * num_blocks * inner, inner, inner, host_offset))
                host_offset += inner
        return cls(list(tensors), segments, num_blocks)

    @classmethod
    def from_vllm_kv_caches(cls, kv_caches: Mapping[str, torch.Tensor], num_blocks: int) -> "KVLayout":
        """vLLM's ``register_kv_caches`` dict (layer name -> tensor), block dimension found by size.

        Layers are taken in insertion order, which is vLLM's layer order.
        """
        tensors = list(kv_caches.values())
        if not tensors:
            raise ValueError("kv_caches is empty")
        shape = tensors[0].shape
        dims = [d for d in (0, 1) if d < len(shape) and shape[d] == num_blocks]
        if len(dims) != 1:
            raise ValueError(
                f"cannot tell the block dimension of KV shape {tuple(shape)} for {num_blocks} blocks; "
                "use KVLayout.from_layer_tensors(tensors, block_dim)"
            )
        return cls.from_layer_tensors(tensors, dims[0])

    def __repr__(self) -> str:
        return (
            f"KVLayout(blocks={self.num_blocks}, block_bytes={self.block_bytes}, "
            f"segments={len(self.segments)}, fused={len(self.fused)}, device={self.device})"
        )
