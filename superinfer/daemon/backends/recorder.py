"""What one iteration of the twin did, recorded: Prometheus metrics, SLO windows, rotation events, transfer totals.

:class:`StepRecorder` reads a :class:`~superinfer.sim.engine.StepResult` and the twin's
:class:`~superinfer.core.EngineState` after the step, and records into the daemon's sinks
(:class:`~superinfer.daemon.metrics.DaemonMetrics`, :class:`~superinfer.daemon.stats.SloWindow`). It
knows nothing of HTTP. Invariants: the Prometheus counters ``superinfer_preemptions_total``,
``superinfer_rotations_total``, ``superinfer_recompute_fallbacks_total`` and the transfer counters grow by
exactly what the state's :class:`~superinfer.core.Counters` grew by since the previous record (or since
construction), so after every record they equal the state's counters minus those at construction;
``superinfer_tenant_rotations_total`` (and :meth:`~superinfer.daemon.stats.SloWindow.rotated`) attribute
each of those rotations to the tenant of the rotated request, so they sum to the rotation delta (a
disagreement is logged as an error);
``superinfer_iterations_total`` counts records. Per finished request (a
:class:`~superinfer.core.state.Finished`): TTFT met iff ``t_first - t_arr <= S_F``, TBT met iff
``(t_end - t_first) / (outputs - 1) <= S_B`` (0 for one token), both iff both, as
:mod:`superinfer.sim.metrics` judges a finished request; every inter-token gap is judged against S_B.
Not thread-safe: the owner serializes :meth:`record` and the readers (the sim backend holds its lock);
:meth:`sample_rates` only appends to a bounded deque.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from superinfer.core.view import PHASE_NAMES as PHASES

if TYPE_CHECKING:
    from superinfer.core import EngineState, Tenant
    from superinfer.core.state import Counters
    from superinfer.daemon.metrics import DaemonMetrics
    from superinfer.daemon.stats import SloWindow
    from superinfer.daemon.tuning import TunerService
    from superinfer.sim.costmodel import CostModel
    from superinfer.sim.engine import StepResult

log = logging.getLogger("superinfer.daemon")
_COUNTED = ("preemptions", "rotations", "recompute_fallbacks")


def phase_counts(st: EngineState) -> list[int]:
    """Live requests per phase, ``[waiting, rotary, running]``."""
    return st.phase_counts()


class StepRecorder:
    """Records every iteration of one twin. ``tenants`` is the profile's tenant list (index = the twin's
    tenant id); ``counters`` the twin state's counters at construction (deltas are taken from there).

    Totals kept for ``/v1/state``: ``iterations``, ``planner_total`` (seconds), ``events`` (the last
    ``max_events`` rotation events), ``xfer`` (bytes and link seconds per direction since construction),
    and the rate samples of :meth:`sample_rates`.
    """

    def __init__(self, cm: CostModel, tenants: Sequence[Tenant], counters: Counters, max_events: int = 100,
                 max_rates: int = 16) -> None:
        if not tenants:
            raise ValueError("StepRecorder needs at least one tenant")
        self.cm = cm
        self.names = [t.name for t in tenants]
        self.ttft_slo = np.array([t.ttft_slo for t in tenants])
        self.tbt_slo = np.array([t.tbt_slo for t in tenants])
        self.iterations = 0
        self.planner_total = 0.0
        self._seen = dict(vars(counters))
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self._rates: deque[tuple[float, float, float, float, float]] = deque(maxlen=max_rates)
        self.xfer = {"h2d_bytes": 0.0, "d2h_bytes": 0.0, "h2d_s": 0.0, "d2h_s": 0.0}
        self._tracking = False  # told the SLO window that rotations are attributed to tenants
        self._mismatch_logged = False

    # ---- per iteration -------------------------------------------------------------------------
    def record(self, res: StepResult, st: EngineState, m: DaemonMetrics, slo: SloWindow, lag: float) -> None:
        """Record the iteration ``res`` that just ended; ``st`` is the twin's state after it, ``lag`` how
        far the previous iteration ended behind the wall clock (``superinfer_sim_lag_seconds``)."""
        names, s = self.names, res.sampled
        self.iterations += 1
        m.iterations.inc()
        m.planner.observe(res.plan_s)
        self.planner_total += res.plan_s
        c = st.counters
        seen = self._seen
        for attr, metric in zip(_COUNTED, (m.preemptions, m.rotations, m.recompute)):
            delta = getattr(c, attr) - seen[attr]
            if delta:
                metric.inc(delta)
        self._record_transfers(c.h2d_blocks - seen["h2d_blocks"], c.d2h_blocks - seen["d2h_blocks"], m)
        # A victim rotated iff it kept KV blocks in DRAM: the condition EngineState.apply counts a rotation
        # by. A victim is neither swapped in nor retired in its own iteration, so its row still shows it.
        victim_rows = st.rows_of(res.plan.victim_ids)
        kept = st.blocks_dram[victim_rows] > 0
        self._record_rotations(res, st, kept)
        self._record_tenant_rotations(res, st, victim_rows[kept], c.rotations - seen["rotations"], m, slo)
        self._seen = dict(vars(c))
        now_m = time.monotonic()
        if s.tenant.shape[0]:
            for ti, n in enumerate(np.bincount(s.tenant, minlength=len(names)).tolist()):
                if n:
                    m.t_tokens[names[ti]].inc(n)
        for ttft, ti in zip(s.first_ttft.tolist(), s.first_tenant.tolist()):
            ok = ttft <= self.ttft_slo[ti]
            m.observe_first_token(names[ti], ttft, ok)
            slo.first_token(names[ti], ttft, ok, now_m)
        gaps, gap_tenant = s.gaps, s.gap_tenant
        if gaps.shape[0]:
            for ti in np.unique(gap_tenant).tolist():
                g = gaps[gap_tenant == ti]
                n_ok = slo.gaps(names[ti], g, now_m, slo_s=float(self.tbt_slo[ti]))
                m.observe_gaps(names[ti], g.tolist(), n_ok)
        for f in s.finished:
            mean = (f.t_end - f.t_first) / (f.outputs - 1) if f.outputs > 1 else 0.0
            ok = bool(mean <= self.tbt_slo[f.tenant])
            ttft_ok = bool(f.t_first - f.t_arr <= self.ttft_slo[f.tenant])
            m.observe_finished(names[f.tenant], ok, ttft_ok)
            slo.finished(names[f.tenant], mean, ok, now_m, ttft_ok=ttft_ok)
        self._record_gauges(st, m, lag)

    def feed(self, res: StepResult, tuner: TunerService, t0: float) -> None:
        """Report the iteration's first tokens and finishes to the online tuner, with arrival times on
        the monotonic clock (the twin's virtual time plus ``t0``), judged as :meth:`record` judges them."""
        s = res.sampled
        for ttft, ti in zip(s.first_ttft.tolist(), s.first_tenant.tolist()):
            tuner.first_token(res.t_end - ttft + t0, self.names[ti], bool(ttft <= self.ttft_slo[ti]))
        for f in s.finished:
            mean = (f.t_end - f.t_first) / (f.outputs - 1) if f.outputs > 1 else 0.0
            tuner.finished(f.t_arr + t0, self.names[f.tenant], bool(f.t_first - f.t_arr <= self.ttft_slo[f.tenant]),
                           bool(mean <= self.tbt_slo[f.tenant]), f.outputs)

    def _record_transfers(self, dh: int, dd: int, m: DaemonMetrics) -> None:
        """Blocks copied host-to-device (``dh``) and device-to-host (``dd``) this iteration."""
        if not (dh or dd):
            return
        bb = self.cm.block_bytes
        sh, sd = self.cm.transfer_s(dh, 0), self.cm.transfer_s(0, dd)
        m.xfer_bytes.labels("h2d").inc(dh * bb)
        m.xfer_bytes.labels("d2h").inc(dd * bb)
        m.xfer_seconds.labels("h2d").inc(sh)
        m.xfer_seconds.labels("d2h").inc(sd)
        x = self.xfer
        x["h2d_bytes"] += dh * bb
        x["d2h_bytes"] += dd * bb
        x["h2d_s"] += sh
        x["d2h_s"] += sd

    def _record_rotations(self, res: StepResult, st: EngineState, kept: np.ndarray) -> None:
        """One event per victim and per swap-in of the plan. A victim is a ``swap_out`` when it kept KV in
        DRAM (``kept``, in victim order: what ``superinfer_rotations_total`` counts), else a ``recompute``;
        ``dropped_tail`` says whether part of its unsynced tail was dropped (to be recomputed) for lack of
        budget or DRAM."""
        plan, t_end = res.plan, res.t_end
        if plan.victim_ids.shape[0] == 0 and plan.swap_ids.shape[0] == 0:
            return
        wall = time.time()
        for rid, d2h, mode, forced, kept_kv in zip(plan.victim_ids.tolist(), plan.victim_d2h.tolist(),
                                                   plan.victim_mode.tolist(), plan.victim_forced.tolist(),
                                                   kept.tolist()):
            self.events.append({"time": wall, "sim_time_s": round(t_end, 6), "kind": "swap_out" if kept_kv else
                                "recompute", "req_id": rid, "tenant": self._tenant_name(st, rid), "blocks": d2h,
                                "forced": bool(forced), "dropped_tail": mode != 0})
        for rid, n in zip(plan.swap_ids.tolist(), plan.swap_blocks.tolist()):
            self.events.append({"time": wall, "sim_time_s": round(t_end, 6), "kind": "swap_in", "req_id": rid,
                                "tenant": self._tenant_name(st, rid), "blocks": n, "forced": False,
                                "dropped_tail": False})

    def _record_tenant_rotations(self, res: StepResult, st: EngineState, rotated: np.ndarray, total: int,
                                 m: DaemonMetrics, slo: SloWindow) -> None:
        """Attribute this iteration's ``total`` rotations to tenants: ``rotated`` are the rows of the
        victims that kept KV in DRAM. Should the two ever disagree (a bug in the core's accounting), the
        tenants get what was found, the total stays the state's, and the first disagreement is logged as an
        error: a metric does not stop serving."""
        if not self._tracking:
            slo.track_rotations()
            self._tracking = True
        if rotated.shape[0] == 0 and not total:
            return
        if rotated.shape[0] != total and not self._mismatch_logged:
            self._mismatch_logged = True
            log.error("rotation attribution found %d rotated victims where the state counted %d "
                      "(iteration ending at %.6f s); per-tenant rotations are off from here",
                      rotated.shape[0], total, res.t_end)
        if rotated.shape[0]:
            now_m = time.monotonic()
            for ti, n in enumerate(np.bincount(st.tenant[rotated], minlength=len(self.names)).tolist()):
                if n:
                    m.t_rotations[self.names[ti]].inc(n)
                    slo.rotated(self.names[ti], n, now_m)

    def _tenant_name(self, st: EngineState, rid: int) -> str:
        r = st.get_row(rid)
        return self.names[int(st.tenant[r])] if r is not None else "?"

    def _record_gauges(self, st: EngineState, m: DaemonMetrics, lag: float) -> None:
        for ph, n in zip(PHASES, phase_counts(st)):
            m.queue.labels(ph).set(n)
        led = st.ledger
        m.blocks_used.labels("hbm").set(led.hbm.used)
        m.blocks_used.labels("dram").set(led.dram.used)
        m.blocks_cap.labels("hbm").set(led.hbm.num_blocks)
        m.blocks_cap.labels("dram").set(led.dram.num_blocks)
        m.lag.set(lag)

    # ---- transfer rates ------------------------------------------------------------------------
    def sample_rates(self, now: float) -> None:
        """Remember the transfer totals at virtual time ``now`` (the engine samples about once a second;
        :meth:`transfer` reports the rate between the oldest and newest kept sample)."""
        x = self.xfer
        self._rates.append((now, x["h2d_bytes"], x["d2h_bytes"], x["h2d_s"], x["d2h_s"]))

    # ---- for /v1/state -------------------------------------------------------------------------
    def transfer(self) -> dict[str, Any]:
        """``{h2d: {gbps, busy_share, bytes_total, seconds_total}, d2h: {...}, window_s}``; rates are 0
        until two samples exist."""
        out: dict[str, Any] = {}
        rates = list(self._rates)
        first = rates[0] if len(rates) > 1 else None
        last = rates[-1] if len(rates) > 1 else None
        span = (last[0] - first[0]) if first and last else 0.0
        for j, d in ((1, "h2d"), (2, "d2h")):
            gbps = (last[j] - first[j]) / span / 1e9 if span > 0 else 0.0
            busy = (last[j + 2] - first[j + 2]) / span if span > 0 else 0.0
            out[d] = {"gbps": round(gbps, 6), "busy_share": round(busy, 6),
                      "bytes_total": int(self.xfer[f"{d}_bytes"]), "seconds_total": round(self.xfer[f"{d}_s"], 6)}
        out["window_s"] = round(span, 3)
        return out

    def planner(self, last: StepResult | None) -> dict[str, Any]:
        """``{last_s, mean_s, iterations}``; ``last`` is the twin's latest step (None before the first)."""
        return {"last_s": round(last.plan_s, 9) if last else 0.0,
                "mean_s": round(self.planner_total / self.iterations, 9) if self.iterations else None,
                "iterations": self.iterations}
