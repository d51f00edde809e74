"""Bandwidth probe (design §4): one-way and both-ways bandwidth at the model's block size, and B_xfer.

Per-direction GB/s are 10^9 bytes per second of each batch's own busy time (CUDA events on GPU; the
worker thread's copy time on CPU), median over repeats. ``duplex_factor`` follows the simulator's
calibration format: per-direction bandwidth while both run divided by one-way bandwidth, averaged over
the two directions and capped at 1. ``b_xfer_blocks`` is ``superinfer.core.budget.b_xfer_blocks`` on the
slower direction's duplex bandwidth. Without a GPU the "device" is host memory: the numbers are DRAM
memcpy figures, reported with a note, never a PCIe/NVLink-C2C claim.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch

from superinfer.core.budget import DEFAULT_ETA, b_xfer_blocks
from superinfer.duplexkv.merge import Direction
from superinfer.duplexkv.rig import Rig, Timing, resolve_device

CPU_NOTE = (
    "no CUDA device: 'device' KV is host memory, so these are DRAM-to-DRAM copies on this machine's CPU "
    "(two worker threads for duplex), not PCIe/C2C bandwidth; use them for ratios only"
)


@dataclass
class ProbeResult:
    device: str
    device_name: str
    backend: str
    block_bytes: int
    h2d_gbps: float
    d2h_gbps: float
    duplex_h2d_gbps: float
    duplex_d2h_gbps: float
    duplex_factor: float
    iteration_s: float
    b_xfer_blocks: int
    eta: float
    bytes_each_way: int
    repeats: int
    note: str | None

    def as_dict(self) -> dict:
        return asdict(self)


def device_label(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    import platform

    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} torch threads)"


def default_bytes_each_way(device: torch.device) -> int:
    return (1 << 30) if device.type == "cuda" else (64 << 20)


def measure(rig: Rig, backend: str, repeats: int) -> dict[str, float]:
    """Median per-direction busy seconds: each direction alone, then both at once."""
    d2h = {Direction.D2H: rig.ops(Direction.D2H, "merged")}
    h2d = {Direction.H2D: rig.ops(Direction.H2D, "merged")}
    both = {**d2h, **h2d}
    rig.run(backend, both, duplex=True)  # warm-up: first touch, kernel compilation, stream creation
    samples: dict[str, list[float]] = {"d2h": [], "h2d": [], "dup_d2h": [], "dup_h2d": []}
    for _ in range(repeats):
        samples["d2h"].append(_busy(rig.run(backend, d2h, duplex=False), "d2h"))
        samples["h2d"].append(_busy(rig.run(backend, h2d, duplex=False), "h2d"))
        t = rig.run(backend, both, duplex=True)
        samples["dup_d2h"].append(_busy(t, "d2h"))
        samples["dup_h2d"].append(_busy(t, "h2d"))
    return {k: statistics.median(v) for k, v in samples.items()}


def _busy(t: Timing, key: str) -> float:
    return max(t.per_direction[key], 1e-9)


def run_probe(
    block_bytes: int,
    *,
    device: str = "auto",
    backend: str = "auto",
    iteration_s: float = 0.05,
    bytes_each_way: int | None = None,
    repeats: int = 5,
    eta: float = DEFAULT_ETA,
) -> ProbeResult:
    """Measure and compute B_xfer. Raises ValueError on bad arguments."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    dev = resolve_device(device)
    nbytes = bytes_each_way or default_bytes_each_way(dev)
    if nbytes < block_bytes:
        raise ValueError(f"probe size {nbytes} bytes is smaller than one block ({block_bytes} bytes)")
    rig = Rig(dev, block_bytes, nbytes, segments=1)
    try:
        name = rig.executor(backend).backend.name
        sec = measure(rig, backend, repeats)
    finally:
        rig.close()
    b = rig.bytes_each_way
    gb = lambda s: b / s / 1e9  # noqa: E731
    h2d, d2h, dh, dd = gb(sec["h2d"]), gb(sec["d2h"]), gb(sec["dup_h2d"]), gb(sec["dup_d2h"])
    factor = min(1.0, (dh / h2d + dd / d2h) / 2)
    budget = b_xfer_blocks(min(dh, dd) * 1e9, iteration_s, block_bytes, eta)
    return ProbeResult(
        device=dev.type,
        device_name=device_label(dev),
        backend=name,
        block_bytes=block_bytes,
        h2d_gbps=round(h2d, 3),
        d2h_gbps=round(d2h, 3),
        duplex_h2d_gbps=round(dh, 3),
        duplex_d2h_gbps=round(dd, 3),
        duplex_factor=round(factor, 3),
        iteration_s=iteration_s,
        b_xfer_blocks=budget,
        eta=eta,
        bytes_each_way=b,
        repeats=repeats,
        note=CPU_NOTE if dev.type == "cpu" else None,
    )
