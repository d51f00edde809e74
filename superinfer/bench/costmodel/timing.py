"""How the profiler times one operator on a GPU (or, to test the code, on the CPU).

On CUDA, ``reps`` back-to-back launches are captured in a CUDA graph and the graph is replayed ``trials``
times between two CUDA events; one trial's time / ``reps`` is one sample: the kernels' device time
without the host's launch gaps. A kernel that cannot be captured is timed as ``reps`` eager launches
instead and named in :data:`GRAPH_FALLBACKS`. On the CPU each sample is one call under ``perf_counter``.
"""

from __future__ import annotations

import csv
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from superinfer.sim.layerops import STATS

DTYPE = torch.bfloat16
#: operators whose launches could not be captured in a CUDA graph (timed back to back instead)
GRAPH_FALLBACKS: list[str] = []


def sample_ms(fn: Callable[[], None], device: str, reps: int, trials: int) -> list[float]:
    """Per-call milliseconds, ``trials`` samples (see the module docstring)."""
    fn()  # compile / allocate workspaces outside the graph
    if not device.startswith("cuda"):
        out = []
        for _ in range(trials):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
        run = graph.replay
    except RuntimeError as exc:  # a kernel that cannot be captured: time back-to-back launches instead
        GRAPH_FALLBACKS.append(f"{getattr(fn, '__name__', 'op')}: {str(exc).splitlines()[0][:200]}")
        torch.cuda.synchronize()

        def run() -> None:
            for _ in range(reps):
                fn()
    run()
    torch.cuda.synchronize()
    out = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / reps)
    del graph
    return out


def stats_ms(ms: list[float]) -> dict[str, float]:
    """The profile files' statistics (:data:`~superinfer.sim.layerops.STATS`) of samples, ms rounded to ns."""
    values = {"min": min(ms), "max": max(ms), "mean": statistics.fmean(ms), "median": statistics.median(ms),
              "std": statistics.pstdev(ms)}
    return {s: round(values[s], 6) for s in STATS}


def write_csv(path: Path, fieldnames: list[str], rows: list[dict[str, object]]) -> None:
    """Replace ``path`` with ``rows`` at once (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fieldnames)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)
