"""When an engine may serve its running batch without planning: bounded staleness (``replan_steps``).

Under sustained overload most of RotaSched's plans decide nothing: the request LVF would serve next does
not fit, no running request may make room for it, and the plan is "serve the batch, hold the queue" (87 %
of the plugin's plans on the real CPU engine at 1.6x capacity, docs/measurements.md, 2026-12-06). A plan
costs as much as vLLM's whole scheduler step, so planning every step cost 11 % of throughput there.

:class:`PlanGate` lets an engine *hold* (serve the running batch as it stands, admit nothing, copy
nothing) for up to ``replan_steps - 1`` steps after a plan that decided nothing, while

* the table's membership is unchanged (:attr:`~superinfer.core.table.RequestTable.version`: nothing
  arrived, left, was preempted or joined the batch since that plan), and
* :func:`batch_holds`: nothing is loading, every running request decodes one token, and the batch's growth
  fits in the free blocks and the token budget (so holding needs no victim: the step is the plan's own
  fast path).

Anything that changes the plan's inputs by an event plans at once. What holding may delay, by at most
``replan_steps - 1`` steps: a rotation whose VLT margin is crossed by time passing, an eager sync of a
block filled meanwhile, an admission that a larger token budget would allow. ``replan_steps = 1`` plans
every step (the behaviour before the gate). The twin holds exactly where the plugin does, so what the twin
predicts stays what the plugin does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from superinfer.core.types import Phase, Plan

_RUNNING = int(Phase.RUNNING)


def batch_holds(cols: Any, rows: np.ndarray, free_blocks: int, token_budget: int, block_size: int) -> bool:
    """True when serving the running batch as it stands needs no decision: some request runs, none is
    loading (``busy`` or ``h2d_pending``), every running request decodes one token, and their growth fits in
    the free blocks and the token budget. ``cols``: a :class:`~superinfer.core.types.Snapshot` or a
    :class:`~superinfer.core.table.RequestTable` (the same column names), ``rows`` its live rows (so an engine
    may ask before it gathers a snapshot)."""
    rr = rows[cols.phase[rows] == _RUNNING]
    if rr.shape[0] == 0 or rr.shape[0] > token_budget or np.any(cols.busy[rows]) or np.any(cols.h2d_pending[rows]):
        return False
    computed = cols.num_computed[rr]
    if np.any(cols.num_tokens[rr] - computed != 1):
        return False
    growth = np.maximum((computed + block_size) // block_size - cols.blocks_hbm[rr], 0)
    return int(growth.sum()) <= free_blocks


def decided_nothing(plan: Plan, running: int) -> bool:
    """The plan only serves the ``running`` requests: no FCFS fallback (stock admission), victim, swap-in,
    eager sync or admission (every scheduled request was running)."""
    return (not plan.fcfs_fallback and plan.victim_ids.shape[0] == 0 and plan.swap_ids.shape[0] == 0
            and plan.sync_ids.shape[0] == 0 and plan.sched_ids.shape[0] == running)


class PlanGate:
    """Whether this step may hold instead of planning (module docstring). Call :meth:`may_hold` each step;
    :meth:`held` when the step held, :meth:`planned` when it planned.

    Invariant: at most ``replan_steps - 1`` steps hold in a row, and only after a plan that decided nothing
    made at the table version they still see.
    """

    def __init__(self) -> None:
        self._version = -1  # the table version of the last plan that decided nothing (-1: none)
        self._held = 0  # steps held since that plan

    def may_hold(self, version: int, replan_steps: int) -> bool:
        return version == self._version and self._held < replan_steps - 1

    def held(self) -> None:
        self._held += 1

    def planned(self, nothing: bool, version: int) -> None:
        """A step decided at table ``version``; ``nothing``: its plan only served the running batch
        (:func:`decided_nothing`, or the policy's ``only_serves_batch`` held), so the next may hold."""
        self._held = 0
        self._version = version if nothing else -1
