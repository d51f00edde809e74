"""N independent replicas behind a load balancer, each a (possibly parallel) engine of the twin (issue 14).

A :class:`Fleet` co-simulates engines in virtual time, earliest event first:

* ``replicas`` copies of one layout; a replica with pipeline parallelism ``pp`` is ``pp`` virtual engines
  (vLLM's in-flight micro-batches, see :mod:`superinfer.sim.parallel`), each with ``1/pp`` of the KV
  pool, of the host pool and of ``max_num_seqs``;
* every arrival goes to a replica chosen by the balancer, then to the replica's least-loaded virtual
  engine (vLLM fills its micro-batches from one queue):

  - ``round-robin``: replica ``k mod N`` for the ``k``-th arrival;
  - ``least-loaded``: the replica with the fewest requests dispatched and not finished *at the arrival
    time* (least outstanding requests; ties to the lowest index);

* each virtual engine is an ordinary :class:`~superinfer.sim.engine.Simulator` driven through ``add`` and
  ``step``, so a one-engine fleet reproduces ``Simulator.run`` exactly (a test checks it).

The merged :class:`~superinfer.sim.engine.Trace` is indexed by the workload's request ids and recorded by
the same :class:`~superinfer.sim.collect.Collector` as ``Simulator.run``, so
:func:`superinfer.sim.metrics.run_metrics` scores a fleet as it scores one engine. Engine-host terms
(``SimConfig.host``) other than per-step costs are not modelled across a fleet.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import replace

import numpy as np

from superinfer.sim.collect import Collector
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, Simulator, Trace
from superinfer.sim.workload import Workload

BALANCERS = ("round-robin", "least-loaded")


class Fleet:
    """``replicas`` x ``pp`` virtual engines on one workload (see the module docstring)."""

    def __init__(self, workload: Workload, cm: CostModel, cfg: SimConfig, *, replicas: int = 1, pp: int = 1,
                 balancer: str = "least-loaded") -> None:
        for name, v in (("replicas", replicas), ("pp", pp)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
        if balancer not in BALANCERS:
            raise ValueError(f"balancer: expected one of {', '.join(BALANCERS)}, got {balancer!r}")
        self.w, self.cm, self.cfg = workload, cm, cfg
        self.replicas, self.pp, self.balancer = replicas, pp, balancer
        hbm = cm.hbm_kv_blocks(cfg.max_num_batched_tokens) if cfg.hbm_blocks is None else int(cfg.hbm_blocks)
        if hbm // pp < 1:
            raise ValueError(f"hbm_blocks: {hbm} blocks cannot be split between {pp} micro-batch engines")
        dram = cfg.dram_blocks
        if dram is None and pp > 1:
            dram = cm.dram_blocks()
        sub = replace(cfg, hbm_blocks=hbm // pp, dram_blocks=None if dram is None else dram // pp,
                      max_num_seqs=max(1, cfg.max_num_seqs // pp))
        self.engines = [Simulator(workload, cm, sub) for _ in range(replicas * pp)]
        self.hbm_blocks_per_rank = hbm
        self.assigned = np.full(len(workload), -1, np.int64)  # engine of each request (replica = engine // pp)

    # ---- dispatch -------------------------------------------------------------------------------
    def _outstanding(self, e: int, t: float) -> int:
        """Requests engine ``e`` holds at time ``t``: live ones, plus those its running step (which ends
        after ``t``) will finish."""
        n = len(self.engines[e].state)
        if self._last_end[e] > t:
            n += self._last_finished[e]
        return n

    def _pick(self, k: int, t: float) -> int:
        """The engine for the ``k``-th arrival at time ``t``."""
        pp = self.pp
        if self.balancer == "round-robin":
            replica = k % self.replicas
        else:
            loads = [sum(self._outstanding(r * pp + v, t) for v in range(pp)) for r in range(self.replicas)]
            replica = loads.index(min(loads))
        first = replica * pp
        if pp == 1:
            return first
        inner = [self._outstanding(first + v, t) for v in range(pp)]
        return first + inner.index(min(inner))

    # ---- the run --------------------------------------------------------------------------------
    def run(self) -> Trace:
        w, engines = self.w, self.engines
        n, e_count = len(w), len(self.engines)
        wall0 = time.perf_counter()
        col = Collector(w, self.cfg.drain_s)
        now = [0.0] * e_count
        self._last_end = [0.0] * e_count
        self._last_finished = [0] * e_count
        heap: list[tuple[float, int]] = []  # (next step start, engine) of busy engines
        in_heap = [False] * e_count
        nxt = 0
        while True:
            t_next = float(w.arrival_s[nxt]) if nxt < n else float("inf")
            if nxt < n and (not heap or t_next <= heap[0][0]):
                e = self._pick(nxt, t_next)
                self.assigned[nxt] = e
                sim = engines[e]
                sim.add(nxt, t_next, int(w.prompt_tokens[nxt]), int(w.output_tokens[nxt]),
                        tenant=int(sim.tenant_index[nxt]), priority=int(sim.priority[nxt]),
                        pred_remaining=float(sim.pred[nxt]))
                nxt += 1
                if not in_heap[e] and len(sim.state):
                    now[e] = max(now[e], t_next)
                    heapq.heappush(heap, (now[e], e))
                    in_heap[e] = True
                continue
            if not heap:
                break
            start, e = heapq.heappop(heap)
            in_heap[e] = False
            if start >= col.deadline:
                continue  # this engine is past the drain deadline: it stops (as Simulator.run does)
            res = engines[e].step(start)
            now[e] = res.t_end
            col.add(res.sampled, start < col.window_end)
            self._last_end[e], self._last_finished[e] = res.t_end, len(res.sampled.finished)
            if len(engines[e].state):
                heapq.heappush(heap, (now[e], e))
                in_heap[e] = True
        return col.trace(engines, sim_s=max(now) if now else 0.0, wall_s=time.perf_counter() - wall0)
