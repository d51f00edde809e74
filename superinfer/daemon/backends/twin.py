"""The simulator, open-ended: requests are injected one by one, as a long-running daemon sees them.

:class:`LiveTwin` *uses* a :class:`superinfer.sim.engine.Simulator` (the same plan / apply / price /
advance iteration the benchmarks run, whose :meth:`~superinfer.sim.engine.Simulator.step` returns a
:class:`~superinfer.sim.engine.StepResult`); what it adds is what the daemon needs and the batch
simulator does not: request ids handed out as requests arrive, a bound on live requests, live params
and ``B_xfer``, and the last step for the ``/v1/state`` ranking.

Invariants: request ids are never reused (a counter), so an id names one request for the daemon's
life; every admitted request is live in ``state`` until its :class:`~superinfer.core.Finished` record
comes back in a step result or it is aborted.
"""

from __future__ import annotations

import itertools

import numpy as np

from superinfer.core import EngineState, Params
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator, StepResult
from superinfer.sim.workload import Workload

MAX_LIVE = 1 << 17  # live requests the twin holds; more are refused as "overloaded"


class LiveTwin:
    """A :class:`Simulator` fed request by request. Not thread-safe: one owner thread calls it."""

    def __init__(self, cm: CostModel, cfg: SimConfig) -> None:
        empty = Workload(arrival_s=np.zeros(0), prompt_tokens=np.zeros(0, np.int64),
                         output_tokens=np.zeros(0, np.int64), tenant_ids=np.zeros(0, np.int32),
                         source="daemon:live")
        self.sim = Simulator(empty, cm, cfg)
        self.last: StepResult | None = None
        #: the last step whose plan ranked by VLT: a step the plan gate held carries no ranking (the last
        #: plan's stands, superinfer.core.gate), so the dashboard shows this one; None once nothing is live
        self.ranked: StepResult | None = None
        self._ids = itertools.count()

    # ---- what the daemon reads and sets --------------------------------------------------------
    @property
    def state(self) -> EngineState:
        return self.sim.state

    @property
    def hbm_blocks(self) -> int:
        return self.sim.hbm_blocks

    @property
    def dram_blocks(self) -> int:
        return self.sim.dram_blocks

    @property
    def b_xfer(self) -> int:
        return self.sim.b_xfer

    def set_params(self, params: Params | None, b_xfer: int) -> None:
        """Live params and ``B_xfer``; they apply from the next iteration on."""
        if params is not None:
            self.sim.cfg.params = params
        self.sim.b_xfer = int(b_xfer)

    # ---- requests in, iterations --------------------------------------------------------------
    def admit(self, now: float, prompt_tokens: int, output_tokens: int, tenant: int, priority: int = 0,
              max_model_len: int | None = None) -> tuple[int | None, str | None]:
        """Add a request arriving at ``now``. Returns (request id, None) or (None, reason it was refused)."""
        st = self.sim.state
        if len(st) >= MAX_LIVE:
            return None, "overloaded"
        rid = next(self._ids)
        if not self.sim.add(rid, now, prompt_tokens, output_tokens, tenant=tenant, priority=priority,
                            pred_remaining=float(output_tokens), max_model_len=max_model_len):
            _, reason = st.rejections.pop()  # keep the list bounded; the counter keeps the count
            return None, reason
        return rid, None

    def step(self, now: float) -> StepResult:
        """One iteration from ``now`` (there must be live requests)."""
        self.last = self.sim.step(now)
        if self.last.plan.vlt_ids.shape[0]:
            self.ranked = self.last
        elif len(self.sim.state) == 0:
            self.ranked = None
        return self.last

    def abort_all(self) -> int:
        """Abort every live request (the drain deadline passed); returns how many."""
        st = self.sim.state
        n = 0
        for rid in st.keys():
            st.abort(rid)
            n += 1
        return n
