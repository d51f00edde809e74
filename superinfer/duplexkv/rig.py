"""A measurement rig shared by the probe and the bench: device KV, host pool, timed batches.

``n`` blocks go device-to-host (device ``D[0:n]`` -> host ``0..n-1``) and ``n`` other blocks go
host-to-device (host ``n..2n-1`` -> device ``D[n:2n]``), so both directions can run at once without
touching the same bytes. ``D`` shuffles the device ids in runs of ``run_blocks`` blocks, like a block
table after some churn, so "merged" means merged over adjacent runs, not one giant copy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from superinfer.duplexkv import pinned
from superinfer.duplexkv.backends import make_backend
from superinfer.duplexkv.executor import default_executor
from superinfer.duplexkv.layout import KVLayout
from superinfer.duplexkv.merge import Direction, merged_ops, naive_ops, total_bytes


def resolve_device(device: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU. Raises ValueError for CUDA without a GPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available here")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return torch.device(device)


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timing:
    seconds: float
    per_direction: dict[str, float]


class Rig:
    def __init__(self, device: torch.device, block_bytes: int, bytes_each_way: int, segments: int, run_blocks: int = 8, seed: int = 0) -> None:
        if block_bytes <= 0 or block_bytes % segments:
            raise ValueError(f"block of {block_bytes} bytes cannot be split into {segments} segments")
        self.device = device
        self.block_bytes = block_bytes
        self.n = max(1, bytes_each_way // block_bytes)
        self.bytes_each_way = self.n * block_bytes
        self.dev = torch.empty(2 * self.n, block_bytes, dtype=torch.uint8, device=device)
        self.dev.random_(0, 256)
        self.host = torch.zeros(2 * self.n * block_bytes, dtype=torch.uint8)
        self._pin = pinned.register(self.host) if device.type == "cuda" else None
        self.layout = KVLayout.block_first(self.dev, segments_per_block=segments)
        rng = np.random.default_rng(seed)
        runs = [np.arange(s, min(s + run_blocks, 2 * self.n)) for s in range(0, 2 * self.n, run_blocks)]
        order = np.concatenate([runs[i] for i in rng.permutation(len(runs))])
        self.d2h_pairs = (order[: self.n], np.arange(self.n))
        self.h2d_pairs = (order[self.n :], np.arange(self.n, 2 * self.n))
        self._executors: dict[str, object] = {}

    def ops(self, direction: Direction, mode: str, max_unit_bytes: int | None = None) -> np.ndarray:
        dev, host = self.d2h_pairs if direction is Direction.D2H else self.h2d_pairs
        if mode == "naive":
            return naive_ops(self.layout, dev, host, direction, 2 * self.n)
        return merged_ops(self.layout, dev, host, direction, 2 * self.n, max_unit_bytes)

    def executor(self, backend: str):
        ex = self._executors.get(backend)
        if ex is None:
            b = make_backend(backend, self.device)
            b.bind([self.host, *self.layout.bases])
            ex = default_executor(b, self.device)
            self._executors[backend] = ex
        return ex

    def run(self, backend: str, batches: dict[Direction, np.ndarray], duplex: bool) -> Timing:
        """Wall time to run the batches: one after the other, or both directions at once."""
        ex = self.executor(backend)
        sync_device(self.device)
        per: dict[str, float] = {}
        t0 = time.perf_counter()
        if duplex:
            handles = [ex.launch(d, ops, total_bytes(ops), []) for d, ops in batches.items()]
            for h in handles:
                h.wait()
                h.raise_if_failed()
            sync_device(self.device)
            total = time.perf_counter() - t0
            for h in handles:
                h.done()
                per[h.direction.value] = h.elapsed_s
            return Timing(total, per)
        for d, ops in batches.items():
            t1 = time.perf_counter()
            h = ex.launch(d, ops, total_bytes(ops), [])
            h.wait()
            h.raise_if_failed()
            sync_device(self.device)
            per[d.value] = time.perf_counter() - t1
        return Timing(time.perf_counter() - t0, per)

    def plain_copy(self, directions: tuple[Direction, ...]) -> Timing:
        """The same bytes as one contiguous ``copy_`` per direction (the CPU yardstick)."""
        nbytes = self.bytes_each_way
        flat = self.dev.view(-1)
        per: dict[str, float] = {}
        sync_device(self.device)
        t0 = time.perf_counter()
        for d in directions:
            t1 = time.perf_counter()
            if d is Direction.D2H:
                self.host[:nbytes].copy_(flat[:nbytes], non_blocking=True)
            else:
                flat[nbytes : 2 * nbytes].copy_(self.host[nbytes : 2 * nbytes], non_blocking=True)
            sync_device(self.device)
            per[d.value] = time.perf_counter() - t1
        return Timing(time.perf_counter() - t0, per)

    def close(self) -> None:
        for ex in self._executors.values():
            ex.close()
        if self._pin is not None:
            self._pin.unregister()

