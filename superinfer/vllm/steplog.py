"""A per-step record of what ``RotaScheduler`` did, for measuring host terms against the engine's own steps.

Off unless a bench sets ``scheduler.step_log = StepLog()`` (on a stock vLLM scheduler: :func:`attach_stock`):
one row per ``schedule()`` call, each with the wall
time to the next call (the whole engine step: scheduler, forward, output processing, the serving loop) and what
the step held: requests and tokens scheduled, their KV context, resumes, the connector's parks, loads and syncs
(counts and blocks), whether the plugin planned, live and waiting requests, requests added since the last step.
:mod:`superinfer.bench.fidelity.steps` prices each step as the twin would and compares what is left.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

#: the columns of a step row, in order
COLUMNS = ("dt_s", "seqs", "tokens", "kv_tokens", "resumes", "parks", "park_blocks", "loads", "load_blocks",
           "sync_blocks", "planned", "live", "waiting", "arrivals")
_LEDGER = ("parks", "swap_out_blocks", "loads", "swap_in_blocks", "sync_blocks")


class StepLog:
    """Rows of :data:`COLUMNS`; a row is complete when the next step starts (its ``dt_s`` is then known)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self._open: list[float] | None = None
        self._t0 = 0
        self._ledger = (0, 0, 0, 0, 0)
        self._plans = 0
        self.arrivals = 0  # requests added since the last step (``RotaScheduler.add_request``)

    def begin(self) -> None:
        """A step starts: the step before it ends here."""
        now = time.perf_counter_ns()
        if self._open is not None:
            self._open[0] = (now - self._t0) * 1e-9
            self.rows.append(tuple(self._open))
        self._open, self._t0 = None, now

    def end(self, out: Any, requests: Mapping[str, Any], ledger_stats: Mapping[str, int], plans: int, live: int,
            waiting: int) -> None:
        """The step's ``SchedulerOutput`` is built: record what it holds (``ledger_stats`` and ``plans`` are the
        running totals of the ledger's counters and of the plugin's timed plans)."""
        sched = out.num_scheduled_tokens
        tokens = int(sum(sched.values()))
        # vLLM advanced num_computed_tokens by this step's tokens already: the context is what came before
        kv = sum(int(requests[r].num_computed_tokens) for r in sched if r in requests) - tokens
        led = tuple(int(ledger_stats.get(k, 0)) for k in _LEDGER)
        d = [a - b for a, b in zip(led, self._ledger)]
        self._open = [0.0, len(sched), tokens, max(kv, 0), len(out.scheduled_cached_reqs.resumed_req_ids), d[0], d[1],
                      d[2], d[3], d[4], int(plans > self._plans), live, waiting, self.arrivals]
        self._ledger, self._plans, self.arrivals = led, plans, 0

    def array(self) -> dict[str, np.ndarray]:
        """The complete rows as columns."""
        a = np.asarray(self.rows, float).reshape(-1, len(COLUMNS))
        return {name: a[:, i] for i, name in enumerate(COLUMNS)}


def attach_stock(sched: Any, log: StepLog) -> None:
    """Record a stock vLLM scheduler instance's steps in ``log`` (its class is unchanged): no plans, parks or
    loads; ``live`` is its running requests, ``waiting`` its waiting queue after the step's admissions."""
    schedule, add_request = sched.schedule, sched.add_request

    def _add_request(request: Any, *args: Any, **kwargs: Any) -> Any:
        log.arrivals += 1
        return add_request(request, *args, **kwargs)

    def _schedule(*args: Any, **kwargs: Any) -> Any:
        log.begin()
        out = schedule(*args, **kwargs)
        log.end(out, sched.requests, {}, 0, len(sched.running), len(sched.waiting))
        return out

    sched.schedule, sched.add_request = _schedule, _add_request
