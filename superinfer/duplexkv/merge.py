"""Turn block pairs into copy operations: per segment (naive) or merged over adjacent runs.

Memory map shared by every backend: base 0 is the host pool, base ``1 + i`` is device tensor ``i`` of the
:class:`KVLayout`. One operation copies ``rows`` rows of ``row_bytes`` bytes from
``src_off + r * src_stride`` of base ``src`` to ``dst_off + r * dst_stride`` of base ``dst``; rows of one
operation never overlap (strides are >= ``row_bytes``).

Merging (design §4): pairs are sorted by device id and cut into runs where both the device id and the
host id go up by one; each run becomes one operation per fused segment. When a segment is contiguous on
both sides (block-first device memory) the run collapses into a single 1-D copy; otherwise it stays a
strided 2-D copy (one per layer tensor and K/V). ``max_unit_bytes`` caps an operation (the paper's
"merged ~4 MB segments"). The same bytes are moved either way; only the number of copies changes.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from superinfer.duplexkv.layout import KVLayout, Segment

HOST_BASE = 0

# column indices of an op table
SRC, SRC_OFF, SRC_STRIDE, DST, DST_OFF, DST_STRIDE, ROW_BYTES, ROWS = range(8)
NCOLS = 8


class Direction(str, Enum):
    """Copy direction. D2H: device to host (swap-out, eager sync); H2D: host to device (swap-in)."""

    H2D = "h2d"
    D2H = "d2h"


def adjacent_runs(dev: np.ndarray, host: np.ndarray) -> np.ndarray:
    """``(n_runs, 3)`` array of (first device id, first host id, length), device ids ascending."""
    if dev.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    order = np.argsort(dev, kind="stable")
    d, h = dev[order], host[order]
    cut = np.flatnonzero((np.diff(d) != 1) | (np.diff(h) != 1)) + 1
    starts = np.concatenate(([0], cut))
    lengths = np.diff(np.concatenate((starts, [d.size])))
    return np.stack([d[starts], h[starts], lengths], axis=1).astype(np.int64)


def _orient(direction: Direction, dev_base, dev_off, dev_stride, host_off, host_stride, row, rows) -> np.ndarray:
    n = np.broadcast(dev_off, host_off, row, rows).shape
    ops = np.empty(n + (NCOLS,), dtype=np.int64)
    if direction is Direction.D2H:
        ops[..., SRC], ops[..., SRC_OFF], ops[..., SRC_STRIDE] = dev_base, dev_off, dev_stride
        ops[..., DST], ops[..., DST_OFF], ops[..., DST_STRIDE] = HOST_BASE, host_off, host_stride
    else:
        ops[..., SRC], ops[..., SRC_OFF], ops[..., SRC_STRIDE] = HOST_BASE, host_off, host_stride
        ops[..., DST], ops[..., DST_OFF], ops[..., DST_STRIDE] = dev_base, dev_off, dev_stride
    ops[..., ROW_BYTES], ops[..., ROWS] = row, rows
    return ops.reshape(-1, NCOLS)


def _check_ids(layout: KVLayout, dev: np.ndarray, host: np.ndarray, host_blocks: int) -> None:
    if dev.shape != host.shape or dev.ndim != 1:
        raise ValueError(f"device and host id lists differ in shape: {dev.shape} vs {host.shape}")
    if dev.size and (dev.min() < 0 or dev.max() >= layout.num_blocks):
        raise ValueError(f"device block id out of range [0, {layout.num_blocks})")
    if host.size and (host.min() < 0 or host.max() >= host_blocks):
        raise ValueError(f"host block id out of range [0, {host_blocks})")


def naive_ops(layout: KVLayout, dev: np.ndarray, host: np.ndarray, direction: Direction, host_blocks: int) -> np.ndarray:
    """One copy per (pair, segment): what a per-layer copy loop does."""
    dev, host = np.asarray(dev, dtype=np.int64), np.asarray(host, dtype=np.int64)
    _check_ids(layout, dev, host, host_blocks)
    tables = []
    for seg in layout.segments:
        tables.append(
            _orient(
                direction,
                1 + seg.base,
                seg.offset + dev * seg.stride,
                seg.stride,
                host * layout.block_bytes + seg.host_offset,
                layout.block_bytes,
                seg.nbytes,
                1,
            )
        )
    ops = np.stack(tables, axis=1).reshape(-1, NCOLS) if tables and dev.size else np.zeros((0, NCOLS), np.int64)
    return ops


def _split(op: np.ndarray, max_unit: int) -> list[np.ndarray]:
    row, rows = int(op[ROW_BYTES]), int(op[ROWS])
    if row * rows <= max_unit:
        return [op]
    out = []
    if rows == 1:
        for start in range(0, row, max_unit):
            piece = op.copy()
            piece[SRC_OFF] += start
            piece[DST_OFF] += start
            piece[ROW_BYTES] = min(max_unit, row - start)
            out.append(piece)
        return out
    per = max(1, max_unit // row)
    for start in range(0, rows, per):
        piece = op.copy()
        piece[SRC_OFF] += start * op[SRC_STRIDE]
        piece[DST_OFF] += start * op[DST_STRIDE]
        piece[ROWS] = min(per, rows - start)
        out.append(piece)
    return out


def merged_ops(
    layout: KVLayout,
    dev: np.ndarray,
    host: np.ndarray,
    direction: Direction,
    host_blocks: int,
    max_unit_bytes: int | None = None,
) -> np.ndarray:
    """One copy per (adjacent run, fused segment), 1-D where contiguous, capped at ``max_unit_bytes``."""
    dev, host = np.asarray(dev, dtype=np.int64), np.asarray(host, dtype=np.int64)
    _check_ids(layout, dev, host, host_blocks)
    if max_unit_bytes is not None and max_unit_bytes <= 0:
        raise ValueError(f"max_unit_bytes must be > 0, got {max_unit_bytes}")
    runs = adjacent_runs(dev, host)
    out: list[np.ndarray] = []
    bb = layout.block_bytes
    for seg in layout.fused:
        ops = _orient(
            direction,
            1 + seg.base,
            seg.offset + runs[:, 0] * seg.stride,
            seg.stride,
            runs[:, 1] * bb + seg.host_offset,
            bb,
            seg.nbytes,
            runs[:, 2],
        )
        if seg.nbytes == seg.stride == bb:  # contiguous on both sides: one 1-D copy per run
            ops[:, ROW_BYTES] = seg.nbytes * ops[:, ROWS]
            ops[:, ROWS] = 1
        out.append(ops)
    table = np.concatenate(out) if out else np.zeros((0, NCOLS), np.int64)
    if max_unit_bytes is not None:
        pieces = [p for op in table for p in _split(op, max_unit_bytes)]
        table = np.stack(pieces) if pieces else np.zeros((0, NCOLS), np.int64)
    return table


def expand_rows(ops: np.ndarray, base_ptrs: np.ndarray, max_job_bytes: int | None = None):
    """Flatten operations into 1-D jobs ``(src_addr, dst_addr, nbytes)`` (arrays of int64).

    ``base_ptrs[i]`` is the address of base ``i``. Jobs longer than ``max_job_bytes`` are cut so a
    kernel can spread one long copy over many programs.
    """
    if ops.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    rows = ops[:, ROWS]
    op_idx = np.repeat(np.arange(len(ops)), rows)
    r = np.arange(op_idx.size) - np.repeat(np.cumsum(rows) - rows, rows)
    o = ops[op_idx]
    src = base_ptrs[o[:, SRC]] + o[:, SRC_OFF] + r * o[:, SRC_STRIDE]
    dst = base_ptrs[o[:, DST]] + o[:, DST_OFF] + r * o[:, DST_STRIDE]
    size = o[:, ROW_BYTES].copy()
    if max_job_bytes is not None and size.size and size.max() > max_job_bytes:
        pieces = (size + max_job_bytes - 1) // max_job_bytes
        j = np.repeat(np.arange(size.size), pieces)
        k = np.arange(j.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        start = k * max_job_bytes
        src, dst = src[j] + start, dst[j] + start
        size = np.minimum(size[j] - start, max_job_bytes)
    return src.astype(np.int64), dst.astype(np.int64), size.astype(np.int64)


def total_bytes(ops: np.ndarray) -> int:
    """Bytes an op table moves."""
    return int((ops[:, ROW_BYTES] * ops[:, ROWS]).sum()) if ops.size else 0


__all__ = [
    "Direction",
    "Segment",
    "adjacent_runs",
    "naive_ops",
    "merged_ops",
    "expand_rows",
    "total_bytes",
    "HOST_BASE",
]
