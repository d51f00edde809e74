"""The ``sim`` backend: the digital twin serving in real time. It is a SIMULATION, and says so.

An engine thread runs :class:`~superinfer.daemon.backends.twin.LiveTwin` (the simulator's iteration over
the real scheduler core) paced against the wall clock: virtual time is ``monotonic() - t0``; an
iteration that the cost model prices at 20 ms ends 20 ms of wall time after it started (if the host is
slower, the next one starts late and ``superinfer_sim_lag_seconds`` says by how much). Requests come from
the profile's workload replay (``[sim]``) and from ``POST /v1/completions``, whose tokens are synthetic
text (``" sim0 sim1 ..."``) produced at the twin's token times. Live params apply from the next
iteration on. Invariants: every admitted request finishes, is aborted at the drain deadline, or is live
(``EngineState.check``); an HTTP waiter always gets a final event (tokens done, or an error).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
from fastapi import Request

from superinfer.core import Phase, rank_order
from superinfer.daemon.backends.base import Backend, Host
from superinfer.daemon.backends.twin import MAX_LIVE, LiveTwin
from superinfer.daemon.httputil import HttpError, error, json_body, resolve_tenant
from superinfer.sim.costmodel import CostModel
from superinfer.sim.engine import SimConfig, reference_iteration_s
from superinfer.sim.hardware import get_hardware
from superinfer.sim.models import get_model
from superinfer.sim.workload import load_workload

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.sim.engine import StepResult

log = logging.getLogger("superinfer.daemon")
GIB = 1 << 30
PHASE_NAMES = {int(Phase.WAITING): "waiting", int(Phase.ROTARY): "rotary", int(Phase.RUNNING): "running"}
SIM_HEADER = {"X-Superinfer-Simulation": "true"}


class SimRequest:
    """An HTTP request inside the twin. ``queue`` receives ("token", n) ... then ("done", info) or
    ("error", message), delivered on the server's event loop."""

    __slots__ = ("tenant", "tenant_idx", "prompt_tokens", "max_tokens", "queue", "rid", "t_submit", "tokens")

    def __init__(self, tenant: str, tenant_idx: int, prompt_tokens: int, max_tokens: int) -> None:
        self.tenant, self.tenant_idx = tenant, tenant_idx
        self.prompt_tokens, self.max_tokens = prompt_tokens, max_tokens
        self.queue: asyncio.Queue = asyncio.Queue()
        self.rid: int | None = None
        self.t_submit = 0.0
        self.tokens = 0


class Replay:
    """The profile's workload, generated chunk by chunk (``chunk_s`` each, seed+1 per chunk), forever."""

    def __init__(self, spec: str, arrival: str, rps: float, chunk_s: float, seed: int, shares: dict[str, float],
                 tenant_index: dict[str, int], max_len: int) -> None:
        self.spec, self.arrival, self.rps, self.chunk_s, self.seed = spec, arrival, rps, chunk_s, seed
        self.shares = shares if len(shares) > 1 else None
        self.tenant_index, self.max_len = tenant_index, max_len
        self.k = -1
        self.i = 0
        self.arr = np.zeros(0)
        self._load_next()

    def _load_next(self) -> None:
        self.k += 1
        w = load_workload(self.spec, arrival=self.arrival, rps=self.rps, duration_s=self.chunk_s,
                          seed=self.seed + self.k, tenants=self.shares, max_len=self.max_len)
        self.arr = w.arrival_s + self.k * self.chunk_s
        self.prompt, self.output = w.prompt_tokens, w.output_tokens
        idx = np.array([self.tenant_index.get(n, 0) for n in w.tenant_names], np.int64)
        self.tenant = idx[w.tenant_ids] if len(w) else np.zeros(0, np.int64)
        self.i = 0

    def next_time(self) -> float:
        while self.i >= self.arr.shape[0]:
            self._load_next()
        return float(self.arr[self.i])

    def pop(self) -> tuple[float, int, int, int]:
        self.next_time()
        i = self.i
        self.i += 1
        return float(self.arr[i]), int(self.prompt[i]), int(self.output[i]), int(self.tenant[i])


class SimBackend(Backend):
    name = "sim"
    simulation = True

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        g = cfg.get
        self.model = get_model(g("engine", "model"))
        self.hardware = get_hardware(g("engine", "hardware"))
        self.cm = CostModel(self.model, self.hardware, g("engine", "block_size"))
        self.policy = g("scheduler", "policy")
        b = g("scheduler", "b_xfer")
        self._cost_b_xfer = self.cm.default_b_xfer(reference_iteration_s(self.cm, g("engine", "max_num_seqs")),
                                                   g("scheduler", "eta"))
        self.simcfg = SimConfig(policy=self.policy, max_num_seqs=g("engine", "max_num_seqs"),
                                max_num_batched_tokens=g("engine", "max_num_batched_tokens"),
                                b_xfer=self._cost_b_xfer if b == "auto" else b, params=cfg.params(),
                                tenants=cfg.tenant_table(),
                                dram_blocks=self.cm.dram_blocks(min(g("engine", "dram_gib") * GIB,
                                                                    self.hardware.dram_bytes)),
                                seed=g("sim", "seed"))
        self.twin = LiveTwin(self.cm, self.simcfg)
        self.tenants = cfg.tenants
        self.tenant_index = {t.name: i for i, t in enumerate(self.tenants)}
        self.ttft_slo = np.array([t.ttft_slo for t in self.tenants])
        self.tbt_slo = np.array([t.tbt_slo for t in self.tenants])
        rps = g("sim", "rps")
        self.replay = (Replay(g("sim", "workload"), g("sim", "arrival"), rps, g("sim", "chunk_s"), g("sim", "seed"),
                              cfg.tenant_shares, self.tenant_index, self.model.max_model_len) if rps > 0 else None)
        self.served = g("engine", "served_model_name") or f"superinfer-sim:{self.model.name}"
        self._lock = threading.Lock()  # guards the twin and everything below
        self._wake = threading.Event()
        self._inbox: deque[SimRequest] = deque()
        self._http: dict[int, SimRequest] = {}
        self._stop = False
        self.admitting = True
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.t0 = time.monotonic()
        self.lag = 0.0
        self.iterations = 0
        self.planner_total = 0.0
        self._seen = dict(vars(self.twin.state.counters))
        self.events: deque[dict] = deque(maxlen=100)
        self._rates: deque[tuple[float, float, float, float, float]] = deque(maxlen=16)
        self.xfer = {"h2d_bytes": 0.0, "d2h_bytes": 0.0, "h2d_s": 0.0, "d2h_s": 0.0}
        self.refused = 0
        self._ids = itertools.count()
        self.host: Host | None = None

    # ---- identity ------------------------------------------------------------------------------
    def model_name(self) -> str:
        return self.served

    def default_b_xfer(self) -> int | None:
        return int(self.twin.b_xfer)

    def block_bytes(self) -> int | None:
        return int(self.cm.block_bytes)

    def clock(self) -> float:
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
            req.queue.put_nowait(("error", "aborted: the daemon is shutting down and the drain deadline passed"))
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
        twin, st = self.twin, self.twin.state
        start = self.clock()
        last_rate = 0.0
        while not self._stop:
            self.beat = time.monotonic()
            with self._lock:
                self._admit(start)
                res = twin.step(start) if len(st) else None
                t_end = res.t_end if res is not None else None
                if res is not None:
                    events = self._after_step(res)
            if t_end is None:
                timeout = 0.25
                if self.replay is not None and self.admitting:
                    timeout = min(timeout, max(self.replay.next_time() - self.clock(), 0.0))
                if timeout > 0:
                    self._wake.wait(timeout)
                self._wake.clear()
                start = self.clock()
                continue
            if events and self._loop is not None:
                self._loop.call_soon_threadsafe(_dispatch, events)
            delay = t_end - self.clock()
            if delay > 0:
                time.sleep(delay)
            now = self.clock()
            self.lag = max(now - t_end, 0.0)
            start = t_end if now <= t_end + 1e-3 else now
            if now - last_rate >= 1.0:
                last_rate = now
                x = self.xfer
                self._rates.append((now, x["h2d_bytes"], x["d2h_bytes"], x["h2d_s"], x["d2h_s"]))

    def _admit(self, now: float) -> None:
        twin, st, m = self.twin, self.twin.state, self.host.metrics
        names = [t.name for t in self.tenants]
        mml = self.model.max_model_len
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

    def _after_step(self, res: "StepResult") -> list:
        """Metrics, windows and HTTP events of the iteration that just ended (lock held)."""
        st, d = self.twin.state, self.host
        m, slo = d.metrics, d.slo
        names = [t.name for t in self.tenants]
        t_end, s = res.t_end, res.sampled
        self.iterations += 1
        m.iterations.inc()
        m.planner.observe(res.plan_s)
        self.planner_total += res.plan_s
        c = st.counters
        seen = self._seen
        for attr, metric in (("preemptions", m.preemptions), ("rotations", m.rotations),
                             ("recompute_fallbacks", m.recompute)):
            delta = getattr(c, attr) - seen[attr]
            if delta:
                metric.inc(delta)
        dh, dd = c.h2d_blocks - seen["h2d_blocks"], c.d2h_blocks - seen["d2h_blocks"]
        if dh or dd:
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
        self._record_rotations(res)
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
                g = gaps[gap_tenant == ti].tolist()
                h = m.t_gap[names[ti]]
                for x in g:
                    h.observe(x)
                slo.gaps(names[ti], g, now_m)
        for f in s.finished:
            mean = (f.t_end - f.t_first) / (f.outputs - 1) if f.outputs > 1 else 0.0
            ok = mean <= self.tbt_slo[f.tenant]
            m.observe_finished(names[f.tenant], ok)
            slo.finished(names[f.tenant], mean, ok, now_m)
        # gauges
        rows = st.live_rows()
        counts = np.bincount(st.phase[rows], minlength=3) if rows.shape[0] else np.zeros(3, np.int64)
        for ph, n in zip(("waiting", "rotary", "running"), counts.tolist()):
            m.queue.labels(ph).set(n)
        led = st.ledger
        m.blocks_used.labels("hbm").set(led.hbm.used)
        m.blocks_used.labels("dram").set(led.dram.used)
        m.blocks_cap.labels("hbm").set(led.hbm.num_blocks)
        m.blocks_cap.labels("dram").set(led.dram.num_blocks)
        m.lag.set(self.lag)
        # HTTP waiters
        events = []
        http = self._http
        if http:
            done = {f.req_id: f for f in s.finished}
            for rid in s.ids.tolist():
                req = http.get(rid)
                if req is None:
                    continue
                f = done.get(rid)
                if f is not None:
                    del http[rid]
                    events.append((req, ("done", {"t_arr": f.t_arr, "t_first": f.t_first, "t_end": t_end})))
                else:
                    events.append((req, ("token", 1)))
        return events

    def _record_rotations(self, res: "StepResult") -> None:
        plan, t_end = res.plan, res.t_end
        if plan.victim_ids.shape[0] == 0 and plan.swap_ids.shape[0] == 0:
            return
        wall = time.time()
        for rid, d2h, mode, forced in zip(plan.victim_ids.tolist(), plan.victim_d2h.tolist(),
                                          plan.victim_mode.tolist(), plan.victim_forced.tolist()):
            self.events.append({"time": wall, "sim_time_s": round(t_end, 6), "kind": "swap_out" if mode == 0 else
                                "recompute", "req_id": rid, "tenant": self._tenant_name(rid), "blocks": d2h,
                                "forced": bool(forced)})
        for rid, n in zip(plan.swap_ids.tolist(), plan.swap_blocks.tolist()):
            self.events.append({"time": wall, "sim_time_s": round(t_end, 6), "kind": "swap_in", "req_id": rid,
                                "tenant": self._tenant_name(rid), "blocks": n, "forced": False})

    def _tenant_name(self, rid: int) -> str:
        st = self.twin.state
        r = st.get_row(rid)
        return self.tenants[int(st.tenant[r])].name if r is not None else "?"

    # ---- state for the API ---------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        with self._lock:
            return {k: int(v) for k, v in vars(self.twin.state.counters).items()}

    def inflight(self) -> int:
        return len(self._http) + len(self._inbox)

    def engine_state(self) -> dict[str, Any]:
        with self._lock:
            st = self.twin.state
            rows = st.live_rows()
            counts = np.bincount(st.phase[rows], minlength=3).tolist() if rows.shape[0] else [0, 0, 0]
            led = st.ledger
            ranking = self._ranking(10)
            counters = {k: int(v) for k, v in vars(st.counters).items()}
            events = list(self.events)[-20:]
            out = {
                "queues": {"waiting": counts[0], "rotary": counts[1], "running": counts[2],
                           "inflight_http": len(self._http) + len(self._inbox)},
                "kv": {"block_size": self.cm.block_size, "block_bytes": self.cm.block_bytes,
                       "hbm": {"used": led.hbm.used, "total": led.hbm.num_blocks},
                       "dram": {"used": led.dram.used, "total": led.dram.num_blocks}},
                "transfer": self._transfer(),
                "counters": counters,
                "ranking": ranking,
                "rotation_events": events,
                "planner": {"last_s": round(self.twin.last.plan_s, 9) if self.twin.last else 0.0,
                            "mean_s": round(self.planner_total / self.iterations, 9) if self.iterations else None,
                            "iterations": self.iterations},
                "sim": {"simulation": True, "hardware": self.hardware.name, "model_profile": self.model.name,
                        "policy": self.policy, "virtual_time_s": round(self.clock(), 3), "lag_s": round(self.lag, 6),
                        "replay": None if self.replay is None else {"workload": self.replay.spec,
                                                                    "rps": self.replay.rps,
                                                                    "arrival": self.replay.arrival,
                                                                    "active": self.admitting},
                        "refused_overload": self.refused},
            }
        return out

    def _ranking(self, top: int) -> list[dict[str, Any]]:
        last = self.twin.last
        if last is None or last.plan.vlt_ids.shape[0] == 0:
            return []
        plan, snap, now = last.plan, last.snapshot, last.t_start
        order = rank_order(plan.vlt_values, plan.vlt_t_arr, plan.vlt_ids)[:top]
        return [{"req_id": int(snap.req_id[i]), "tenant": self.tenants[int(snap.tenant[i])].name,
                 "phase": PHASE_NAMES[int(snap.phase[i])], "vlt_s": round(float(plan.vlt_values[i]), 6),
                 "age_s": round(now - float(snap.t_arr[i]), 6)} for i in order.tolist()]

    def _transfer(self) -> dict[str, Any]:
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

    # ---- OpenAI-style endpoint -----------------------------------------------------------------
    def register_routes(self, app: "FastAPI", host: Host) -> None:
        daemon = host
        backend = self

        @app.get("/v1/models", tags=["openai"])
        async def models() -> dict:
            return {"object": "list", "data": [{"id": backend.served, "object": "model", "owned_by": "superinfer",
                                                "simulation": True}]}

        @app.post("/v1/completions", tags=["openai"],
                  summary="Completion from the digital twin (synthetic text at the twin's token times)")
        async def completions(request: Request):
            try:
                body = await json_body(request)
                if not isinstance(body, dict):
                    raise HttpError(400, "expected a JSON object")
                req = backend._parse(body, daemon)
            except HttpError as exc:
                return exc.response()
            if not backend.admitting or daemon.draining:
                return error(503, "draining: the daemon is shutting down", "unavailable", headers={"Retry-After": "5"})
            if backend.inflight() >= daemon.cfg.get("engine", "max_inflight"):
                daemon.metrics.rejected.labels(req.tenant, "overloaded").inc()
                return error(503, "overloaded: too many requests in flight", "unavailable", headers={"Retry-After": "1"})
            req.t_submit = backend.clock()
            with backend._lock:
                backend._inbox.append(req)
            backend._wake.set()
            cid = f"cmpl-sim-{next(backend._ids)}"
            if body.get("stream"):
                from fastapi.responses import StreamingResponse

                return StreamingResponse(backend._stream(req, cid), media_type="text/event-stream",
                                         headers=SIM_HEADER)
            return await backend._collect(req, cid)

    def _parse(self, body: dict, daemon: Host) -> SimRequest:
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            n = max(1, (len(prompt) + 3) // 4)
        elif isinstance(prompt, list) and prompt and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
            n = len(prompt)
        else:
            raise HttpError(400, "prompt must be a non-empty string or a list of token ids "
                                 "(one prompt per request in the twin)", param="prompt")
        max_tokens = body.get("max_tokens", 16)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= 65536:
            raise HttpError(400, f"max_tokens must be an integer within [1, 65536], got {max_tokens!r}",
                            param="max_tokens")
        if n + max_tokens > self.model.max_model_len:
            raise HttpError(400, f"prompt ({n} tokens) + max_tokens ({max_tokens}) exceeds the model's "
                                 f"{self.model.max_model_len}", param="max_tokens")
        tenant = resolve_tenant(body, self.tenant_index, self.tenants[0].name,
                                daemon.cfg.get("slo", "unknown_tenant"))
        return SimRequest(tenant, self.tenant_index[tenant], n, max_tokens)

    def _choice(self, start: int, n: int) -> str:
        return "".join(f" sim{i}" for i in range(start, start + n))

    async def _collect(self, req: SimRequest, cid: str):
        from fastapi.responses import JSONResponse

        while True:
            kind, value = await req.queue.get()
            if kind == "token":
                req.tokens += value
            elif kind == "error":
                return error(503, value, "unavailable")
            else:
                req.tokens += 1
                return JSONResponse(self._body(req, cid, self._choice(0, req.tokens), "length", value),
                                    headers=SIM_HEADER)

    def _body(self, req: SimRequest, cid: str, text: str, finish: str | None, info: dict | None) -> dict:
        out = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": self.served,
               "system_fingerprint": "superinfer-sim",
               "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
        if info is not None:
            out["usage"] = {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.tokens,
                            "total_tokens": req.prompt_tokens + req.tokens}
            ttft = info["t_first"] - info["t_arr"]
            out["superinfer"] = {"simulation": True, "tenant": req.tenant, "ttft_s": round(ttft, 6),
                                 "tbt_mean_s": round((info["t_end"] - info["t_first"]) / (req.tokens - 1), 6)
                                 if req.tokens > 1 else None}
        else:
            out["superinfer"] = {"simulation": True}
        return out

    async def _stream(self, req: SimRequest, cid: str):
        import json

        while True:
            kind, value = await req.queue.get()
            if kind == "error":
                yield "data: " + json.dumps({"error": {"message": value, "type": "unavailable", "code": 503}}) + "\n\n"
                yield "data: [DONE]\n\n"
                return
            start = req.tokens
            req.tokens += value if kind == "token" else 1
            finish = "length" if kind == "done" else None
            chunk = self._body(req, cid, self._choice(start, req.tokens - start), finish,
                               value if kind == "done" else None)
            yield "data: " + json.dumps(chunk) + "\n\n"
            if kind == "done":
                yield "data: [DONE]\n\n"
                return


def _dispatch(events: list) -> None:
    for req, event in events:
        req.queue.put_nowait(event)
