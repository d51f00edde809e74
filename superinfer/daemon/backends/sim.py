"""The ``sim`` backend: the digital twin serving in real time. It is a SIMULATION, and says so.

An engine thread runs :class:`~superinfer.daemon.backends.twin.LiveTwin` (the simulator's iteration over
the real scheduler core) paced against the wall clock: virtual time is ``monotonic() - t0``; an
iteration that the cost model prices at 20 ms ends 20 ms of wall time after it started (if the host is
slower, the next one starts late and ``superinfer_sim_lag_seconds`` says by how much). Requests come from
the profile's workload replay (``[sim]``) and from ``POST /v1/completions``, whose tokens are synthetic
text (``" sim0 sim1 ..."``) produced at the twin's token times. Live params apply from the next
iteration on. Invariants: every admitted request finishes, is aborted at the drain deadline, or is live
(``EngineState.check``); an HTTP waiter always gets a final event (tokens done, or an error).

Here: identity, lifecycle, the engine thread (admit -> step -> record -> dispatch HTTP events -> pace) and
the ``/v1/state`` document; beside it, ``replay`` (workload replay), ``recorder`` (metrics, SLO windows,
rotation events, transfer totals per iteration) and ``sim_http`` (the OpenAI endpoint and its events).
Thread-safety: ``_lock`` guards the twin, the recorder, the inbox and the HTTP waiter table; the replay
belongs to the engine thread (the API reads only its fixed settings); waiters' events are delivered on
the server's event loop (``loop.call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from superinfer.core.view import ranking_rows
from superinfer.core.wait import WaitPredictor
from superinfer.daemon.backends.base import Backend, Host
from superinfer.daemon.backends.recorder import StepRecorder, phase_counts
from superinfer.daemon.backends.replay import Replay
from superinfer.daemon.backends.sim_http import SimRequest, dispatch, register_openai_routes, waiter_events
from superinfer.daemon.backends.twin import MAX_LIVE, LiveTwin
from superinfer.daemon.httputil import retry_after_s
from superinfer.daemon.profile_twin import twin_of

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.daemon.config import Config
    from superinfer.sim.engine import StepResult

log = logging.getLogger("superinfer.daemon")
IDLE_WAIT_S = 0.25  # the longest the engine sleeps with nothing live (a submit or a stop wakes it)
RATE_SAMPLE_S = 1.0  # virtual seconds between transfer-rate samples
ABORTED = "aborted: the daemon is shutting down and the drain deadline passed"


def ranking(last: StepResult | None, names: list[str], top: int) -> list[dict[str, Any]]:
    """The ``top`` first of ``last``'s VLT ranking (:func:`~superinfer.core.view.ranking_rows`), ages at the
    step's start; ``names`` by tenant index."""
    if last is None:
        return []
    return ranking_rows(last.plan, last.snapshot, last.t_start, names.__getitem__, top)


class SimBackend(Backend):
    """The digital twin as a :class:`Backend` (see the module docstring)."""

    name = "sim"
    simulation = True

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        g = cfg.get
        self.cm, self.simcfg = twin_of(cfg)
        self.model, self.hardware = self.cm.model, self.cm.hardware
        self.policy = g("scheduler", "policy")
        self.twin = LiveTwin(self.cm, self.simcfg)
        self.max_queue_s = self.simcfg.tenants.max_queue_s  # first-token deadlines, per tenant (inf: none)
        self._deadlines = bool(np.isfinite(self.max_queue_s).any())
        self.tenants = cfg.tenants
        self.names = [t.name for t in self.tenants]
        self.tenant_index = {t.name: i for i, t in enumerate(self.tenants)}
        self.default_tenant = self.names[0]  # the config puts the default tenant first
        self.max_model_len = self.model.max_model_len
        rps = g("sim", "rps")
        self.replay = (Replay(g("sim", "workload"), g("sim", "arrival"), rps, g("sim", "chunk_s"), g("sim", "seed"),
                              cfg.tenant_shares, self.tenant_index, self.max_model_len) if rps > 0 else None)
        self.served = g("engine", "served_model_name") or f"superinfer-sim:{self.model.name}"
        self._lock = threading.Lock()  # guards the twin and everything below
        self._wake = threading.Event()
        self._inbox: deque[SimRequest] = deque()
        self._http: dict[int, SimRequest] = {}
        self.predictor = WaitPredictor() if cfg.get("slo", "shed_at_admission") else None
        self.recorder = StepRecorder(self.cm, self.tenants, self.twin.state.counters)
        self._stop = False
        self.admitting = True
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.t0 = time.monotonic()
        self.lag = 0.0
        self.refused = 0
        self.host: Host | None = None

    # ---- identity ------------------------------------------------------------------------------
    def model_name(self) -> str:
        return self.served

    def default_b_xfer(self) -> int | None:
        return int(self.twin.b_xfer)

    def block_bytes(self) -> int | None:
        return int(self.cm.block_bytes)

    def clock(self) -> float:
        """Virtual time: seconds since the engine started (``monotonic() - t0``)."""
        return time.monotonic() - self.t0

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self, host: Host) -> None:
        self.host = host
        self._loop = asyncio.get_running_loop()
        self.twin.set_params(host.store.params(), int(host.store.values["b_xfer"]))
        log.warning("SIMULATION: backend 'sim' is the digital twin (%s on %s, policy %s, %d HBM / %d DRAM KV "
                    "blocks, B_xfer %d); no model runs and completions are synthetic text",
                    self.model.name, self.hardware.name, self.policy, self.twin.hbm_blocks, self.twin.dram_blocks,
                    self.twin.b_xfer)
        if self.replay is not None:
            log.warning("SIMULATION: replaying workload %r at %.3g req/s (%s arrivals) in real time",
                        self.replay.spec, self.replay.rps, self.replay.arrival)
        self.t0 = time.monotonic()
        self.beat = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="superinfer-twin", daemon=True)
        self._thread.start()

    def on_params(self, values: dict[str, float | int]) -> None:
        params = self.host.store.params() if self.host else None
        with self._lock:
            self.twin.set_params(params, int(values["b_xfer"]))

    def stop_admission(self) -> None:
        self.admitting = False
        self._wake.set()

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._thread is not None and self._thread.is_alive():
            with self._lock:
                live = len(self.twin.state) + len(self._inbox)
            if live == 0:
                break
            await asyncio.sleep(0.02)
        aborted = 0
        with self._lock:
            pending = list(self._inbox)
            self._inbox.clear()
            aborted = self.twin.abort_all()
            waiters = list(self._http.values()) + pending
            self._http.clear()
        for req in waiters:
            req.queue.put_nowait(("error", ABORTED))
        if aborted:
            log.warning("drain deadline (%.1f s) passed: aborted %d live requests", timeout_s, aborted)
        return {"aborted": aborted, "counters": self.counters()}

    async def close(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5.0)

    # ---- the engine loop (its own thread) ------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # noqa: BLE001 - reported on /healthz and in the log
            self.crashed = exc
            log.exception("the twin's engine loop died")

    def _serve(self) -> None:
        """Admit -> step -> record -> dispatch HTTP events -> pace, until :meth:`close`. An iteration
        starts where the previous one ended (``t_end``) unless the host fell more than 1 ms behind; with
        nothing live the loop sleeps until the next replay arrival, a submit, or :data:`IDLE_WAIT_S`."""
        twin, st, rec = self.twin, self.twin.state, self.recorder
        start = self.clock()
        last_rate = 0.0
        while not self._stop:
            self.beat = time.monotonic()
            with self._lock:
                self._admit(start)
                self._shed(start)
                res = twin.step(start) if len(st) else None
                if res is not None:
                    rec.record(res, st, self.host.metrics, self.host.slo, self.lag)
                    if self.predictor is not None:
                        rows = st.live_rows()
                        self.predictor.observe(res.t_end, int(np.count_nonzero(st.outputs[rows] == 0)),
                                               int(res.sampled.first_ids.shape[0]))
                    if self.host.tuner is not None:
                        rec.feed(res, self.host.tuner, self.t0)
                    events = waiter_events(self._http, res.sampled, res.t_end)
            if res is None:
                timeout = IDLE_WAIT_S
                if self.replay is not None and self.admitting:
                    timeout = min(timeout, max(self.replay.next_time() - self.clock(), 0.0))
                if timeout > 0:
                    self._wake.wait(timeout)
                self._wake.clear()
                start = self.clock()
                continue
            if events and self._loop is not None:
                self._loop.call_soon_threadsafe(dispatch, events)
            t_end = res.t_end
            delay = t_end - self.clock()
            if delay > 0:
                time.sleep(delay)
            now = self.clock()
            self.lag = max(now - t_end, 0.0)
            start = t_end if now <= t_end + 1e-3 else now
            if now - last_rate >= RATE_SAMPLE_S:
                last_rate = now
                rec.sample_rates(now)

    def _admit(self, now: float) -> None:
        """Admit the submitted HTTP requests, then the replay's arrivals up to ``now`` (lock held). A
        refused HTTP request gets its error event; every refusal is counted in
        ``superinfer_requests_rejected_total`` (``engine`` or ``overloaded``)."""
        twin, st, m = self.twin, self.twin.state, self.host.metrics
        names = self.names
        mml = self.max_model_len
        while self._inbox:
            req = self._inbox.popleft()
            rid, reason = (None, "overloaded") if len(st) >= MAX_LIVE else twin.admit(
                req.t_submit, req.prompt_tokens, req.max_tokens, req.tenant_idx,
                self.tenants[req.tenant_idx].priority, mml)
            if rid is None:
                m.rejected.labels(req.tenant, "engine").inc()
                self._loop.call_soon_threadsafe(req.queue.put_nowait, ("error", f"rejected by the engine: {reason}"))
                continue
            req.rid = rid
            self._http[rid] = req
            m.t_arrived[req.tenant].inc()
            if self.host.tuner is not None:
                self.host.tuner.arrival(req.t_submit + self.t0, req.tenant, req.prompt_tokens)
        if self.replay is None or not self.admitting:
            return
        while self.replay.next_time() <= now:
            t, prompt, output, tenant = self.replay.pop()
            if len(st) >= MAX_LIVE:
                self.refused += 1
                m.rejected.labels(names[tenant], "overloaded").inc()
                continue
            rid, reason = twin.admit(t, prompt, output, tenant, self.tenants[tenant].priority, mml)
            if rid is None:
                m.rejected.labels(names[tenant], "engine").inc()
            else:
                m.t_arrived[names[tenant]].inc()
                if self.host.tuner is not None:
                    self.host.tuner.arrival(t + self.t0, names[tenant], prompt)

    def _shed(self, now: float) -> None:
        """Shed the requests still without a first token at their tenant's deadline (lock held): counted in
        ``superinfer_requests_shed_total`` and the SLO window (a miss); an HTTP waiter gets a ``shed`` event
        (503 with ``Retry-After``, :mod:`superinfer.daemon.backends.sim_http`)."""
        if not self._deadlines:
            return
        tenants: list[int] = []
        ids = self.twin.state.shed_expired(now, self.max_queue_s, tenants)
        for rid, ti in zip(ids, tenants):
            name = self.names[ti]
            self.host.metrics.shed.labels(name, "deadline").inc()
            req = self._http.pop(rid, None)
            waited = now - req.t_submit if req is not None else float(self.max_queue_s[ti])
            self.host.slo.shed(name, waited)
            if req is not None:
                self._loop.call_soon_threadsafe(req.queue.put_nowait, ("shed", retry_after_s(self.tenants[ti].ttft_slo)))

    # ---- HTTP ----------------------------------------------------------------------------------
    def register_routes(self, app: FastAPI, host: Host) -> None:
        register_openai_routes(app, host, self)

    def submit(self, req: SimRequest) -> None:
        """Queue an HTTP request for the next admission (any thread); stamps ``req.t_submit``."""
        req.t_submit = self.clock()
        with self._lock:
            self._inbox.append(req)
        self._wake.set()

    # ---- state for the API ---------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        with self._lock:
            return {k: int(v) for k, v in vars(self.twin.state.counters).items()}

    def inflight(self) -> int:
        return len(self._http) + len(self._inbox)

    def engine_state(self) -> dict[str, Any]:
        """The backend's part of ``/v1/state``: ``queues, kv, transfer, counters, ranking,
        rotation_events, planner, sim`` (field names: docs/daemon.md)."""
        with self._lock:
            st, rec = self.twin.state, self.recorder
            counts = phase_counts(st)
            led = st.ledger
            replay = self.replay
            return {
                "queues": {"waiting": counts[0], "rotary": counts[1], "running": counts[2],
                           "inflight_http": len(self._http) + len(self._inbox)},
                "kv": {"block_size": self.cm.block_size, "block_bytes": self.cm.block_bytes,
                       "hbm": {"used": led.hbm.used, "total": led.hbm.num_blocks},
                       "dram": {"used": led.dram.used, "total": led.dram.num_blocks}},
                "transfer": rec.transfer(),
                "counters": {k: int(v) for k, v in vars(st.counters).items()},
                "ranking": ranking(self.twin.ranked, self.names, 10),
                "rotation_events": list(rec.events)[-20:],
                "planner": rec.planner(self.twin.last),
                "sim": {"simulation": True, "hardware": self.hardware.name, "model_profile": self.model.name,
                        "policy": self.policy, "virtual_time_s": round(self.clock(), 3), "lag_s": round(self.lag, 6),
                        "replay": None if replay is None else {"workload": replay.spec, "rps": replay.rps,
                                                               "arrival": replay.arrival, "active": self.admitting},
                        "refused_overload": self.refused},
            }
