"""``superinfer.vllm.RotaScheduler``: vLLM's V1 scheduler driven by the RotaSched core (LVF).

Load with ``--scheduler-cls superinfer.vllm.RotaScheduler`` (``LLM(scheduler_cls=...)``), normally with
:class:`superinfer.vllm.DuplexKVConnector` so that victims are parked, not recomputed.

Each ``schedule()``:

1. refresh the core's request table from vLLM (running requests; others change only on events) and
   read the live parameters (:mod:`superinfer.vllm.params`);
2. ask the core for a plan (``lvf`` by default; ``$SUPERINFER_POLICY`` or the connector's extra config
   ``policy`` choose another);
3. if the core says *FCFS fallback* (everything fits), run stock vLLM unchanged (plus the planned eager
   syncs); otherwise apply the plan: running requests sorted by VLT (vLLM serves them in list order and
   its own preemption takes ``running[-1]``, the smallest VLT), the plan's victims preempted up front
   (their unsynced tails parked by the connector within ``B_xfer``), and vLLM's waiting loop shown only
   the requests the plan admits, largest VLT first. vLLM still allocates every block itself, so its
   invariants (and its own forced preemption, as a safety net) hold.

Under vLLM's async scheduling (its default on GPUs) the same class path gives :class:`RotaAsyncScheduler`.

Invariants: vLLM's queues hold every live request (nothing is hidden from ``has_requests`` or aborts);
the table has one row per live request; a plan error falls back to stock behaviour for that step
(counted in ``stats["plan_errors"]``), it never stops the engine.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Any

import numpy as np
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy, create_request_queue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from superinfer.core import (Capacity, Phase, Plan, PlanGate, RequestTable, Snapshot, batch_holds, batch_token_budget,
                             decided_nothing, get_policy, nothing_to_plan, rank_order)
from superinfer.core.view import ranking_rows
from superinfer.vllm.connector import DuplexKVConnector, connector_extra
from superinfer.vllm.mirror import pool_free, refresh_ledger, refresh_running, safe_computed
from superinfer.vllm.params import (ENV_CALIBRATION, ENV_PARAMS_FILE, ENV_POLICY, LiveParams, ParamSource,
                                    load_step_model)
from superinfer.vllm.stats import ENV_STATS_FILE, StatsFile, add_plan_time
from superinfer.vllm.stepfit import OnlineStepFit
from superinfer.vllm.steplog import StepLog
from superinfer.vllm.tenants import RequestTenants

log = logging.getLogger(__name__)
_MAX_PLAN_ERROR_LOGS = 5
#: validate the snapshot on one plan in this many (the first included); a full check costs about a third
#: of a small batch's plan, and the table it checks is the plugin's own
_VALIDATE_EVERY = 16
_RUNNING = int(Phase.RUNNING)


class RotaScheduler(Scheduler):
    """vLLM ``Scheduler`` whose admission, victims and rotation follow the RotaSched core."""

    def __new__(cls, *args: Any, **kwargs: Any) -> RotaScheduler:
        config = kwargs.get("vllm_config", args[0] if args else None)  # vLLM scheduling async: RotaAsyncScheduler
        if cls is RotaScheduler and getattr(getattr(config, "scheduler_config", None), "async_scheduling", False):
            cls = RotaAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if getattr(self.vllm_config.scheduler_config, "async_scheduling", False) and not isinstance(self, AsyncScheduler):
            raise ValueError(f"{type(self).__name__} subclasses the synchronous RotaScheduler but vLLM schedules "
                             "asynchronously: subclass RotaAsyncScheduler, or pass --no-async-scheduling")
        if self.policy != SchedulingPolicy.FCFS:
            raise ValueError("RotaScheduler orders requests itself: use --scheduling-policy fcfs (the default)")
        extra = connector_extra(self.vllm_config)
        self.param_source = ParamSource(os.environ.get(ENV_PARAMS_FILE) or extra.get("params_file"))
        self.core_policy = get_policy(os.environ.get(ENV_POLICY) or extra.get("policy", "lvf"))
        self.step_model = load_step_model(os.environ.get(ENV_CALIBRATION) or extra.get("calibration"))
        self.step_fit = OnlineStepFit()  # the step-time model where no calibration file gives one
        self._max_tokens = int(self.max_num_scheduled_tokens)
        self.clock = time.time  # the clock of Request.arrival_time
        self.table = RequestTable()
        self.stats: collections.Counter[str] = collections.Counter()
        self.stats_file = StatsFile(os.environ.get(ENV_STATS_FILE))  # published for the daemon, each second
        self.last_plan: Plan | None = None
        self.ranked: tuple[Plan, Snapshot, float] | None = None  # the last plan that ranked, its snapshot, time
        self.ledger = self.connector.ledger if isinstance(self.connector, DuplexKVConnector) else None
        self._r2b = self.kv_cache_manager.coordinator.single_type_managers[0].req_to_blocks
        self._hbm_blocks = max(1, int(self.kv_cache_config.num_blocks) - 1)  # block 0 is vLLM's null block
        self._d2h_left = 0
        self._plans = 0
        self._pre_computed: dict[str, int] = {}
        self.tenants = RequestTenants(self.stats)
        self._vlt_by_row = np.zeros(0)
        self.gate = PlanGate()  # bounded staleness between plans (superinfer.core.gate), as the twin's
        self.step_log: StepLog | None = None  # a bench's per-step record (superinfer.vllm.steplog); off by default

    # -- requests in and out ---------------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        super().add_request(request)
        if self.step_log is not None:
            self.step_log.arrivals += 1
        rid = request.request_id
        if rid not in self.table and rid in self.requests:
            self.table.add(rid, float(request.arrival_time), int(request.num_tokens), tenant=self.tenants.index_of(request),
                           priority=int(getattr(request, "priority", 0) or 0))

    def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        out = super()._free_request(request, *args, **kwargs)
        self.table.remove(request.request_id)
        self._pre_computed.pop(request.request_id, None)
        if len(self.table) == 0:
            self._write_stats()  # drained: a cheap moment to publish counters (multiprocess engines)
        return out

    # -- preemption (ours and vLLM's) -------------------------------------------------------------
    def _preempt_request(self, request: Any, timestamp: float, *args: Any, **kwargs: Any) -> None:
        rid = request.request_id
        computed = safe_computed(request)
        parked = 0
        if self.ledger is not None:
            block_ids = self.kv_cache_manager.get_block_ids(rid)[0]
            parked, used = self.ledger.preempt(rid, block_ids, computed, max(0, self._d2h_left))
            self._d2h_left -= used
        self._pre_computed[rid] = computed
        self.stats["preempted_in_flight"] += computed < request.num_computed_tokens  # async: a step in flight
        super()._preempt_request(request, timestamp, *args, **kwargs)
        self.stats["preemptions"] += 1
        t = self.table
        r = t.get_row(rid)
        if r is not None:  # its KV: nothing on the device, the parked tokens' blocks on the host
            t.blocks_hbm[r] = 0
            t.blocks_dram[r] = -(-parked // self.block_size)
            t.synced[r] = t.syncing[r] = 0
            t.preempted(r, parked)

    # -- the step ---------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t0_ns, live, now = time.perf_counter_ns(), self.param_source.current(), self.clock()
        if self.step_log is not None:
            self.step_log.begin()
        self.stats["steps"] += 1
        refresh_running(self.table, self.running, self._r2b, self.kv_holding_waiting)
        self._d2h_left = live.b_xfer
        if self._holds(live):
            out = self._schedule_with([], args, kwargs)  # decodes only: the token budget would not cut them
        else:
            refresh_ledger(self.table, self.running, self.ledger)
            snap = self.table.snapshot()
            self.max_num_scheduled_tokens = self._token_budget(live, now)  # vLLM's pass reads it as its budget
            try:
                out = self._schedule_step(snap, live, now, args, kwargs)
            finally:
                self.max_num_scheduled_tokens = self._max_tokens
        self._after_schedule(out, now)
        self.step_fit.begin(t0_ns, out.num_scheduled_tokens, self.requests, key=out)
        if self.stats_file.due():
            self._write_stats()
        if self.step_log is not None:
            self.step_log.end(out, self.requests, self.ledger.stats if self.ledger is not None else {},
                              self.stats["plan_timed"], len(self.table), len(self.waiting))
        return out

    def _holds(self, live: LiveParams) -> bool:
        """Whether this step serves the running batch without planning (:mod:`superinfer.core.gate`); asked of
        the table before any snapshot, as cheaply as it can be."""
        t = self.table
        if not (self.core_policy.gated and self.gate.may_hold(t.version, live.params.replan_steps)):
            return False
        rows = t.live_rows()
        if self.kv_holding_waiting or not batch_holds(t, rows, self._plannable_free(int(t.blocks_hbm[rows].sum())),
                                                      self._max_tokens, self.block_size):
            return False
        self.gate.held()
        self.stats["held_steps"] += 1
        return True

    def _schedule_step(self, snap: Snapshot, live: LiveParams, now: float, args: tuple, kwargs: dict) -> Any:
        version, gate = self.table.version, self.gate
        cap = self._capacity(snap, live)
        gate.planned(False, version)  # unless the step turns out to decide nothing, below
        if not self.waiting and not self.kv_holding_waiting and nothing_to_plan(snap, cap):
            # Every request runs and fits, nothing to copy: the plan would be "serve the batch"; skip it.
            self.stats["quiet_steps"] += 1
            self.last_plan = None
            return super().schedule(*args, **kwargs)
        if self.core_policy.only_serves_batch(snap, cap, live.params, self.tenants.table(live), now):
            # Requests wait, but none fits and nobody may make room: serve the batch without planning.
            self.stats["blocked_steps"] += 1
            self.last_plan = None
            gate.planned(True, version)
            return self._schedule_with([], args, kwargs)
        t0 = time.perf_counter_ns()
        plan = self._plan(snap, cap, live, now)
        self.last_plan = plan
        if plan is not None and plan.vlt_ids.shape[0]:
            self.ranked = (plan, snap, now)
        if plan is None or plan.fcfs_fallback or plan.vlt_ids.shape[0] == 0:
            self.stats["fallback_steps" if plan is not None else "stock_steps"] += 1
            if plan is not None:
                self._apply_syncs(plan)
            add_plan_time(self.stats, t0, len(snap))
            return super().schedule(*args, **kwargs)
        self.stats["pressure_steps"] += 1
        gate.planned(decided_nothing(plan, int(np.count_nonzero(snap.phase == _RUNNING))), version)
        admitted = self._apply(plan)
        add_plan_time(self.stats, t0, len(snap))
        return self._schedule_with(admitted, args, kwargs)

    def _token_budget(self, live: LiveParams, now: float) -> int:
        """RotaSched v2's SLO-aware token budget (as the twin's), with the calibration file's fit as the
        step-time model, else the online fit (:mod:`superinfer.vllm.stepfit`); vLLM's own budget before a
        model exists, for other policies, or when no prefill is pending."""
        share, model = live.params.step_slo_share, self.step_model or self.step_fit.model()
        if model is None or not self.core_policy.spec.slo_guards or share <= 0:
            return self._max_tokens
        if not self.waiting and all(r.num_tokens - r.num_computed_tokens <= 1 for r in self.running):
            return self._max_tokens  # decodes only: never cut
        t = self.table
        budget = batch_token_budget(t, t.live_rows(), model, share, self.tenants.table(live).tbt_slo, now,
                                    self._max_tokens)
        if budget < self._max_tokens:
            self.stats["budget_cut_steps"] += 1
        return budget

    def _plannable_free(self, used: int) -> int:
        """Device blocks free for the plan (:func:`pool_free`), given the ``used`` blocks the table counts."""
        return min(pool_free(self), max(0, self._hbm_blocks - used))

    def _capacity(self, snap: Snapshot, live: LiveParams) -> Capacity:
        free = self._plannable_free(int(snap.blocks_hbm.sum()))
        if self.kv_holding_waiting:  # async loads: vLLM resumes them first, each taking its next token's block
            bs, r2b = self.block_size, self._r2b
            growth = sum(max(0, -(-r.num_tokens // bs) - len(r2b.get(r.request_id, ()))) for r in self.kv_holding_waiting)
            free = max(0, free - growth)
        return Capacity(
            hbm_blocks=self._hbm_blocks,
            free_blocks=int(free),
            b_xfer=int(live.b_xfer),
            token_budget=int(self.max_num_scheduled_tokens),
            max_num_seqs=int(self.max_num_running_reqs),
            block_size=int(self.block_size),
            dram_free_blocks=int(self.ledger.free) if self.ledger is not None else 0,
        )

    def _plan(self, snap: Snapshot, cap: Capacity, live: LiveParams, now: float) -> Plan | None:
        if len(snap) == 0:
            return None
        self._plans += 1
        check = self._plans % _VALIDATE_EVERY == 1  # the table is ours: check it on a sample of plans
        try:
            return self.core_policy.plan(snap, cap, live.params, self.tenants.table(live), now, validate=check)
        except (ValueError, IndexError) as exc:  # IndexError: a bad table between two validated plans
            self.stats["plan_errors"] += 1
            if self.stats["plan_errors"] <= _MAX_PLAN_ERROR_LOGS:
                log.error("RotaScheduler: core plan failed, running stock vLLM this step: %r", exc)
            return None

    def _apply_syncs(self, plan: Plan) -> None:
        if self.ledger is None or plan.sync_ids.shape[0] == 0:
            return
        key_of, reqs = self.table.key_of, self.requests
        for seq, n in zip(plan.sync_ids.tolist(), plan.sync_blocks.tolist()):
            if self._d2h_left <= 0:
                break
            rid = key_of(seq)
            req = reqs.get(rid) if rid is not None else None
            if req is None or req.status != RequestStatus.RUNNING:
                continue
            block_ids = self.kv_cache_manager.get_block_ids(rid)[0]
            self._d2h_left -= self.ledger.plan_sync(rid, block_ids, safe_computed(req),
                                                    min(int(n), self._d2h_left))

    def _apply(self, plan: Plan) -> list[Any]:
        """Order running by VLT, preempt the plan's victims, return the admitted requests in VLT order."""
        t = self.table
        rows = t.live_rows()
        if self._vlt_by_row.shape[0] < t.live.shape[0]:
            self._vlt_by_row = np.zeros(t.live.shape[0])
        vlt = self._vlt_by_row
        vlt[rows] = plan.vlt_values
        run = self.running
        if run:
            rr = t.rows_of_keys([r.request_id for r in run])
            order = rank_order(vlt[rr], t.t_arr[rr], t.req_id[rr])
            self.running = [run[i] for i in order.tolist()]
        key_of, reqs = t.key_of, self.requests
        ts = time.monotonic()
        for seq, forced in zip(plan.victim_ids.tolist(), plan.victim_forced.tolist()):
            req = reqs.get(key_of(seq))
            if req is None or req.status != RequestStatus.RUNNING or req not in self.running:
                continue
            self.running.remove(req)
            self._preempt_request(req, ts)
            self.stats["forced_victims" if forced else "rotations"] += 1
        self._apply_syncs(plan)
        cand = set(plan.sched_ids.tolist())
        cand.update(plan.swap_ids.tolist())
        admitted = []
        for seq in cand:
            req = reqs.get(key_of(seq))
            if req is not None and req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                admitted.append(req)
        if admitted:
            ar = t.rows_of_keys([r.request_id for r in admitted])
            admitted = [admitted[i] for i in rank_order(vlt[ar], t.t_arr[ar], t.req_id[ar]).tolist()]
        return admitted

    def _schedule_with(self, admitted: list[Any], args: tuple, kwargs: dict) -> Any:
        """Run vLLM's pass with a waiting queue holding only ``admitted``; restore the rest after."""
        full = self.waiting
        sub = create_request_queue(SchedulingPolicy.FCFS)
        if admitted:
            full.remove_requests(admitted)
            for r in admitted:
                sub.add_request(r)
        self.waiting = sub
        try:
            return super().schedule(*args, **kwargs)
        finally:
            rest = self.waiting
            self.waiting = full
            if rest:  # admitted, not taken by vLLM: the plan misjudged room, or (async) a victim's blocks come next step
                self.stats["admissions_refused"] += len(rest)
                full.prepend_requests(reversed(list(rest)))

    def _after_schedule(self, out: Any, now: float) -> None:
        t = self.table
        for nr in out.scheduled_new_reqs:
            r = t.get_row(nr.req_id)
            if r is not None:
                t.joined(r, now, swapped_in=False)
        for rid in out.scheduled_cached_reqs.resumed_req_ids:
            r = t.get_row(rid)
            if r is None:
                continue
            t.joined(r, now, swapped_in=True)
            scheduled = int(out.num_scheduled_tokens.get(rid, 0))
            start = int(self.requests[rid].num_computed_tokens) - scheduled  # _update_after_schedule ran
            before = self._pre_computed.pop(rid, 0)
            self.stats.update(resumed=1, resumed_scheduled_tokens=scheduled, recomputed_tokens=max(0, before - start))

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.step_fit.end(key=scheduler_output)
        now = self.clock()
        t, reqs = self.table, self.requests
        keys = [rid for rid in scheduler_output.num_scheduled_tokens if rid in t]  # not finished this step
        if keys:
            rows = t.rows_of_keys(keys)
            counts = np.fromiter((reqs[k].num_output_tokens for k in keys), np.int64, len(keys))
            sampled = counts != t.outputs[rows]
            if sampled.any():
                t.token_sampled(rows[sampled], now, counts[sampled])
        return outputs

    def plan_now(self, now: float | None = None) -> Plan | None:
        """Re-read the params file now and plan without applying (observability, tests)."""
        self.param_source.poll()
        residency = self.table.residency.copy()
        refresh_running(self.table, self.running, self._r2b, self.kv_holding_waiting)
        refresh_ledger(self.table, self.running, self.ledger)
        self.table.residency[:] = residency  # not an iteration: do not advance residency
        live, snap = self.param_source.live, self.table.snapshot()
        return self._plan(snap, self._capacity(snap, live), live, self.clock() if now is None else now)

    # -- observability -----------------------------------------------------------------------------
    def ranking(self, top: int | None = None, plan: Plan | None = None) -> list[tuple[str, float]]:
        """A plan's ranking (default: the last step's): (vLLM request id, VLT), largest VLT first."""
        plan = plan or self.last_plan
        if plan is None or plan.vlt_ids.shape[0] == 0:
            return []
        ids, vlt = plan.ranking(top)
        key_of = self.table.key_of
        return [(k, v) for k, v in ((key_of(i), v) for i, v in zip(ids.tolist(), vlt.tolist())) if k is not None]

    def stats_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scheduler": dict(self.stats), "params_reloads": self.param_source.reloads,
                               "params_rejected": self.param_source.rejected,
                               "queues": dict(zip(("waiting", "rotary", "running"), self.table.phase_counts())),
                               "step_model": {"source": "file" if self.step_model else "online"} | self.step_fit.stats(),
                               "ranking": ranking_rows(*(self.ranked or (None, None, 0.0)), self.tenants.name_of, 10,
                                                       key=self.table.key_of)}
        if self.ledger is not None:
            out.update(ledger=dict(self.ledger.stats), host_free=self.ledger.free, host_capacity=self.ledger.capacity)
        return out

    def _write_stats(self) -> None:
        """Publish :meth:`stats_dict` to ``$SUPERINFER_STATS_FILE`` (if set), atomically."""
        self.stats_file.write(self.stats_dict)

    def shutdown(self) -> None:
        self._write_stats()
        super().shutdown()


class RotaAsyncScheduler(RotaScheduler, AsyncScheduler):
    """RotaScheduler over vLLM's ``AsyncScheduler`` (docs/vllm-plugin.md, "Async scheduling"): parks and syncs copy
    only settled KV (``safe_computed``), vLLM's deferred frees keep a victim's blocks until its step is processed."""
