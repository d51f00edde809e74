"""The simulator, open-ended: requests are injected one by one and ids are recycled.

:class:`LiveTwin` subclasses :class:`superinfer.sim.engine.Simulator` and keeps its :meth:`step` (the same
plan / apply / price / advance iteration the benchmarks run); what it adds is what a long-running daemon
needs and the batch simulator does not:

* :meth:`LiveTwin.admit` adds one request at a given time (the workload is not known in advance);
* request ids live in a ring of :data:`RING` slots (the simulator's per-request arrays are indexed by id),
  reused only once their request left, so memory stays bounded however long the daemon runs;
* :class:`TappedState` and :class:`PolicyTap` record, per iteration, which requests sampled a token,
  which got their first one, which finished, the plan (for the VLT ranking) and the planning time.

Hooks the simulator could offer instead (reported to its owner): an ``admit`` method, per-step events
(sampled ids, finished) returned from ``step``, and the last plan.
"""

from __future__ import annotations

import time

import numpy as np

from superinfer.core import EngineState, Finished, Plan, Snapshot
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator
from superinfer.sim.workload import Workload

RING = 1 << 18  # request-id slots; live requests must stay below this (the backend rejects beyond it)


class TappedState(EngineState):
    """EngineState that remembers what the last :meth:`advance` did."""

    last_sampled: np.ndarray  # request ids that produced a token
    last_first: np.ndarray  # ... of which their first one
    last_first_ttft: np.ndarray  # t_end - t_arr of those
    last_tenant_sampled: np.ndarray
    last_done: list[Finished]

    def advance(self, plan: Plan, t_end: float, rows: np.ndarray | None = None) -> list[Finished]:
        if plan.sched_ids.shape[0]:
            rows = self.rows_of(plan.sched_ids) if rows is None else rows
        done = super().advance(plan, t_end, rows)
        if plan.sched_ids.shape[0]:
            # Rows of finished requests are freed but their columns stay intact until reused.
            sampled = rows[self.t_last[rows] == t_end]
            first = sampled[self.t_first[sampled] == t_end]
            self.last_sampled = self.req_id[sampled].copy()
            self.last_tenant_sampled = self.tenant[sampled].copy()
            self.last_first = self.req_id[first].copy()
            self.last_first_ttft = t_end - self.t_arr[first]
        else:
            self.last_sampled = self.last_first = self.last_tenant_sampled = np.zeros(0, np.int64)
            self.last_first_ttft = np.zeros(0)
        self.last_done = done
        return done


class PolicyTap:
    """Wraps a core policy: times each plan and keeps the last (plan, snapshot) for the ranking."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.last_plan: Plan | None = None
        self.last_snap: Snapshot | None = None
        self.last_now = 0.0
        self.last_s = 0.0

    def plan(self, snap, cap, params, tenants, now, *, validate=True) -> Plan:
        t0 = time.perf_counter()
        plan = self.policy.plan(snap, cap, params, tenants, now, validate=validate)
        self.last_s = time.perf_counter() - t0
        self.last_plan, self.last_snap, self.last_now = plan, snap, now
        return plan


class LiveTwin(Simulator):
    """A :class:`Simulator` fed request by request. Not thread-safe: one owner thread calls it."""

    def __init__(self, cm: CostModel, cfg: SimConfig) -> None:
        empty = Workload(arrival_s=np.zeros(0), prompt_tokens=np.zeros(0, np.int64),
                         output_tokens=np.zeros(0, np.int64), tenant_ids=np.zeros(0, np.int32),
                         source="daemon:live")
        super().__init__(empty, cm, cfg)
        self.state = TappedState(self.hbm_blocks, self.dram_blocks, cm.block_size, grow=1024)
        self.policy = PolicyTap(self.policy)
        self.t_first = np.full(RING, np.nan)
        self.t_end = np.full(RING, np.nan)
        self.outputs = np.zeros(RING, np.int64)
        self.last_token = np.full(RING, np.nan)
        self.rotations = np.zeros(RING, np.int64)
        self.t_arr_of = np.zeros(RING)
        self._next_slot = 0

    def free_slot(self) -> int | None:
        """A request id not in use (None if all :data:`RING` are live)."""
        live = self.state._row
        for _ in range(RING):
            slot = self._next_slot
            self._next_slot = (slot + 1) % RING
            if slot not in live:
                return slot
        return None

    def admit(self, now: float, prompt_tokens: int, output_tokens: int, tenant: int, priority: int = 0,
              max_model_len: int | None = None) -> tuple[int | None, str | None]:
        """Add a request arriving at ``now``. Returns (request id, None) or (None, reason it was refused)."""
        slot = self.free_slot()
        if slot is None:
            return None, "overloaded"
        self.t_first[slot] = self.t_end[slot] = self.last_token[slot] = np.nan
        self.outputs[slot] = self.rotations[slot] = 0
        self.t_arr_of[slot] = now
        st = self.state
        if not st.add(slot, now, prompt_tokens, output_tokens, tenant=tenant, priority=priority,
                      pred_remaining=float(output_tokens), max_model_len=max_model_len):
            _, reason = st.rejections.pop()  # keep the list bounded; the counter keeps the count
            return None, reason
        return slot, None

    def take_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Inter-token gaps recorded since the last call, and their tenants."""
        if not self._gaps:
            return np.zeros(0), np.zeros(0, np.int64)
        gaps, tenants = np.concatenate(self._gaps), np.concatenate(self._gap_tenant)
        self._gaps.clear()
        self._gap_tenant.clear()
        return gaps, tenants
