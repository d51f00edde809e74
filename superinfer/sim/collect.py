"""What a run of the twin records, gathered once for every loop that drives it (issue 26).

:class:`Collector` is the one place that turns the twin's iterations into a :class:`Trace`: the batch
simulator (:meth:`superinfer.sim.engine.Simulator.run`), the fleet (:meth:`superinfer.sim.fleet.Fleet.run`)
and the tuner's replay (:func:`superinfer.tuner.offline.replay.replay`) each keep their own control flow
(when to step which engine, what to do between steps) and hand every iteration's
:class:`~superinfer.core.Sampled` to :meth:`Collector.add`; at the end :meth:`Collector.trace` reads what
is still live off the engines' states and builds the trace.

Invariants:

* arrays are indexed by the workload's request ids (``0 .. len(w) - 1``), whichever engine served them;
* a request's ``t_end`` is set only by its :class:`~superinfer.core.Finished` record (NaN while
  unfinished); requests still live at the end get ``t_first``, ``outputs``, ``rotations`` and
  ``last_token`` from their engine's state (a request is in at most one engine);
* ``window_tokens`` counts the tokens of the iterations the loop says began inside the arrival window
  (``add(..., in_window=...)``); ``window_end`` and ``deadline`` (window end plus the drain) are the
  same for every loop;
* ``counters`` are the engines' state counters plus ``shed_predicted`` (refused at arrival) and
  ``held_steps`` (the plan gate held the batch), summed over the engines, for every loop alike;
* ``t_shed`` exists only where the loop sheds (``sheds=True``); otherwise the trace has ``t_shed=None``;
* nothing here changes an engine: it reads states and the records the engines return (it checks each
  state's invariants, ``EngineState.check``, when building the trace).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from superinfer.core import EngineState, Sampled
    from superinfer.sim.costmodel import CostModel
    from superinfer.sim.workload import Workload

UNBOUNDED = 1 << 40  # a transfer budget without a bound (vLLM's offloading connector)


@dataclass
class Trace:
    """What the run recorded, for :mod:`superinfer.sim.metrics`."""

    t_arr: np.ndarray
    t_first: np.ndarray
    t_end: np.ndarray  # NaN while unfinished
    outputs: np.ndarray  # output tokens produced (so far)
    last_token: np.ndarray
    rotations: np.ndarray
    tenant: np.ndarray
    gaps: np.ndarray  # every inter-token gap of every request (seconds)
    gap_tenant: np.ndarray
    rejected: int = 0
    window_tokens: int = 0  # output tokens produced before the end of the arrival window
    iterations: int = 0
    sim_s: float = 0.0
    wall_s: float = 0.0
    counters: dict = field(default_factory=dict)
    max_swap_in_blocks_per_iter: int = 0
    max_swap_out_blocks_per_iter: int = 0
    max_hbm_blocks_used: int = 0
    hbm_blocks: int = 0
    dram_blocks: int = 0
    b_xfer_blocks: int = 0
    block_bytes: int = 0
    t_shed: np.ndarray | None = None  # when a request was shed at its first-token deadline (NaN: not shed)


class Engine(Protocol):
    """What :meth:`Collector.trace` reads of an engine (a :class:`~superinfer.sim.engine.Simulator`)."""

    state: EngineState
    cm: CostModel
    tenant_index: np.ndarray
    max_h2d: int
    max_d2h: int
    max_used: int
    hbm_blocks: int
    dram_blocks: int
    b_xfer: int
    n_refused: int
    held_steps: int


class Collector:
    """The record of one run over workload ``w`` with ``drain_s`` of drain (see the module docstring)."""

    def __init__(self, w: Workload, drain_s: float, *, sheds: bool = False) -> None:
        n = len(w)
        self.w = w
        end_of_arrivals = float(w.arrival_s[-1]) if n else 0.0
        self.window_end = max(float(w.duration_s), end_of_arrivals)  # arrivals stop here
        self.deadline = self.window_end + drain_s  # no iteration starts at or after this
        self.t_first, self.t_end, self.last_token = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.t_shed = np.full(n, np.nan) if sheds else None
        self.outputs, self.rotations = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.gaps: list[np.ndarray] = []
        self.gap_tenant: list[np.ndarray] = []
        self.iterations = 0
        self.tokens = 0
        self.window_tokens = 0

    def add(self, s: Sampled, in_window: bool = True) -> None:
        """One iteration's samples; ``in_window``: it counts towards ``window_tokens``."""
        self.iterations += 1
        k = s.ids.shape[0]
        self.tokens += k
        if in_window:
            self.window_tokens += k
        if s.gaps.shape[0]:
            self.gaps.append(s.gaps)
            self.gap_tenant.append(s.gap_tenant)
        for f in s.finished:
            self.t_first[f.req_id], self.t_end[f.req_id], self.last_token[f.req_id] = f.t_first, f.t_end, f.t_end
            self.outputs[f.req_id], self.rotations[f.req_id] = f.outputs, f.rotations

    def shed(self, ids: list[int], now: float) -> None:
        """Requests shed at ``now`` (only with ``sheds=True``)."""
        assert self.t_shed is not None, "this collector does not record sheds"
        self.t_shed[ids] = now

    def _live(self, st: EngineState) -> None:
        """Fill in the requests still live in ``st`` (at the deadline), and check its invariants."""
        rows = st.live_rows()
        ids = st.req_id[rows]
        self.t_first[ids], self.outputs[ids], self.rotations[ids] = st.t_first[rows], st.outputs[rows], st.rotations[rows]
        self.last_token[ids] = np.where(st.outputs[rows] > 0, st.t_last[rows], np.nan)
        st.check()

    def trace(self, engines: Sequence[Engine], *, sim_s: float, wall_s: float) -> Trace:
        """The trace of the run over ``engines`` (the first gives the tenant index, the pool sizes and
        ``B_xfer``; maxima are over all; counters are summed over all)."""
        counters: dict[str, int] = {}
        for e in engines:
            self._live(e.state)
            for k, v in (*vars(e.state.counters).items(), ("shed_predicted", e.n_refused),
                         ("held_steps", e.held_steps)):
                counters[k] = counters.get(k, 0) + int(v)
        first = engines[0]
        b = first.b_xfer
        return Trace(
            t_arr=self.w.arrival_s.copy(),
            t_first=self.t_first,
            t_end=self.t_end,
            t_shed=self.t_shed,
            outputs=self.outputs,
            last_token=self.last_token,
            rotations=self.rotations,
            tenant=first.tenant_index,
            gaps=np.concatenate(self.gaps) if self.gaps else np.zeros(0),
            gap_tenant=np.concatenate(self.gap_tenant) if self.gap_tenant else np.zeros(0, np.int64),
            rejected=counters.get("rejected", 0),
            window_tokens=self.window_tokens,
            iterations=self.iterations,
            sim_s=sim_s,
            wall_s=wall_s,
            counters=counters,
            max_swap_in_blocks_per_iter=max(e.max_h2d for e in engines),
            max_swap_out_blocks_per_iter=max(e.max_d2h for e in engines),
            max_hbm_blocks_used=max(e.max_used for e in engines),
            hbm_blocks=first.hbm_blocks,
            dram_blocks=first.dram_blocks,
            b_xfer_blocks=b if b < UNBOUNDED else -1,
            block_bytes=first.cm.block_bytes,
        )
