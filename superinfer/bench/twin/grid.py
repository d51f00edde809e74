"""Run grids of simulations: (policy, rps, seed[, variant]) -> metrics, in parallel processes.

Every run is independent and deterministic for its seed (:func:`superinfer.sim.run.run_one`), so the grid
is spread over a process pool and the result does not depend on the number of workers.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from superinfer.sim.run import RunSpec, run_one


def run_grid(specs: list[RunSpec], workers: int | None = None) -> list[dict]:
    """Run every spec; results in the order given."""
    workers = workers or min(len(specs), os.cpu_count() or 1)
    if workers <= 1 or len(specs) <= 1:
        return [run_one(s) for s in specs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_one, specs, chunksize=1))


def grid(base: RunSpec, policies: list[str], rps: list[float | None], seeds: int, **overrides: object) -> list[RunSpec]:
    return [replace(base, policy=p, rps=r, seed=s, **overrides) for p in policies for r in rps for s in range(seeds)]
