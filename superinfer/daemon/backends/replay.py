"""The profile's workload (``[sim]``), replayed into the twin forever, chunk by chunk.

Chunk ``k`` is ``load_workload(..., duration_s=chunk_s, seed=seed + k)`` shifted by ``k * chunk_s``, so the
stream is deterministic for a seed and its arrival times never decrease: each chunk's arrivals are
sorted and lie in ``[0, chunk_s)`` before the shift. A chunk with no arrivals is skipped. Tenants are
mapped to the profile's tenant indices (a workload tenant the profile does not name becomes tenant 0).
Not thread-safe: the engine thread owns it.
"""

from __future__ import annotations

import numpy as np

from superinfer.sim.workload import load_workload


class Replay:
    """The profile's workload, generated chunk by chunk (``chunk_s`` each, seed+1 per chunk), forever.

    :meth:`next_time` peeks at the next arrival, :meth:`pop` takes it; both load the next chunk when the
    current one is used up. ``shares`` (tenant name -> weight) is passed to the workload only when it
    names more than one tenant.
    """

    def __init__(self, spec: str, arrival: str, rps: float, chunk_s: float, seed: int, shares: dict[str, float],
                 tenant_index: dict[str, int], max_len: int) -> None:
        if not chunk_s > 0:
            raise ValueError(f"replay chunk_s must be > 0, got {chunk_s!r}")
        self.spec, self.arrival, self.rps, self.chunk_s, self.seed = spec, arrival, rps, chunk_s, seed
        self.shares = shares if len(shares) > 1 else None
        self.tenant_index, self.max_len = tenant_index, max_len
        self.k = -1
        self.i = 0
        self.arr = np.zeros(0)
        self._load_next()

    def _load_next(self) -> None:
        self.k += 1
        w = load_workload(self.spec, arrival=self.arrival, rps=self.rps, duration_s=self.chunk_s,
                          seed=self.seed + self.k, tenants=self.shares, max_len=self.max_len)
        self.arr = w.arrival_s + self.k * self.chunk_s
        self.prompt, self.output = w.prompt_tokens, w.output_tokens
        idx = np.array([self.tenant_index.get(n, 0) for n in w.tenant_names], np.int64)
        self.tenant = idx[w.tenant_ids] if len(w) else np.zeros(0, np.int64)
        self.i = 0

    def next_time(self) -> float:
        """The next arrival time (seconds of virtual time), without taking it."""
        while self.i >= self.arr.shape[0]:
            self._load_next()
        return float(self.arr[self.i])

    def pop(self) -> tuple[float, int, int, int]:
        """Take the next arrival: ``(time, prompt tokens, output tokens, tenant index)``."""
        self.next_time()
        i = self.i
        self.i += 1
        return float(self.arr[i]), int(self.prompt[i]), int(self.output[i]), int(self.tenant[i])
