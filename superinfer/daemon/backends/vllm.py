"""The ``vllm`` backend: vLLM's OpenAI server as a child process, with the superinfer plugin wired in.

The child (``python -m vllm.entrypoints.openai.api_server``) listens on loopback only
(``--engine-port``, default a free port) with ``--scheduler-cls superinfer.vllm.RotaScheduler``, the
``DuplexKVConnector`` KV connector, vLLM's own choice of async scheduling unless ``engine.async_scheduling``
names one, and the profile's engine settings; it reads
live params from ``<state-dir>/params.json`` (``SUPERINFER_PARAMS_FILE``), which the daemon rewrites
atomically on every ``PUT /v1/params``. Clients talk to the daemon's port: ``/v1/completions``,
``/v1/chat/completions`` and ``/v1/models`` are proxied to the child after the tenant is resolved
(``vllm_xargs.tenant``; unknown -> default tenant or 400, per profile); a streamed request is answered only
once its first token is there, or shed with 503 at its tenant's first-token deadline, and its tokens are
timed per tenant (:mod:`superinfer.daemon.backends.vllm_stream`). Invariants: the child dies with the daemon (``PR_SET_PDEATHSIG``); after
:meth:`stop_admission` new requests get 503 while in-flight ones finish; the child is stopped only after
the drain.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response

from superinfer.core.wait import WaitPredictor
from superinfer.daemon import parallel
from superinfer.daemon.admission import shed_at_admission
from superinfer.daemon.backends.base import Backend, Host
from superinfer.daemon.backends.vllm_child import (
    STATS_FILE,
    EngineChild,
    free_port,
    plugin_view,
    served_default,
    vllm_command,
    wiring,
)
from superinfer.daemon.backends.vllm_stream import outcome_of, stream_completion
from superinfer.daemon.errors import StartError
from superinfer.daemon.httputil import HttpError, error, json_body, resolve_tenant
from superinfer.daemon.tenant_limit import TenantLimit
from superinfer.daemon.wire import TENANT_XARG, XARGS_FIELD

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.daemon.config import Config

log = logging.getLogger("superinfer.daemon")
PROXIED = ("/v1/completions", "/v1/chat/completions")
ENGINE_KEEPALIVE_S = 2.0  # idle expiry of the proxy's connections to the vLLM child (below its 5 s keep-alive)
_METRIC_RE = re.compile(r"^(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$", re.M)


def raise_open_files(needed: int) -> None:
    """Raise this process's soft limit on open files to ``needed`` (at most the hard limit), with a warning when
    the hard limit is lower: past it, accepting a connection fails."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        log.warning("open files limited to %d (hard limit); engine.max_inflight requests in flight need about %d: "
                    "raise LimitNOFILE or lower engine.max_inflight", target, needed)


class VllmBackend(Backend):
    name = "vllm"
    simulation = False

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        g = cfg.get
        self.model_path = g("engine", "model_path")
        self.served = g("engine", "served_model_name") or served_default(self.model_path)
        # names a request may give for the model: the served one, and the path it was loaded from
        self.aliases = {self.served, self.model_path, str(Path(self.model_path).expanduser().resolve())}
        self.tp, self.pp = g("engine", "tensor_parallel_size"), g("engine", "pipeline_parallel_size")
        self.executor = g("engine", "distributed_executor_backend")
        self.world = self.tp * self.pp
        self.cpu_binding: str | None = None
        # one rank's KV block (its heads, its stage's layers): what each worker parks, and B_xfer's unit
        self._block_bytes = parallel.rank_block_bytes(self.model_path, g("engine", "block_size"), g("engine", "dtype"),
                                                      self.tp, self.pp)
        self.tenant_index = {t.name: i for i, t in enumerate(cfg.tenants)}
        self.tenants = cfg.tenants
        self.child = EngineChild(cfg.state_dir / STATS_FILE)
        self.plugin: dict[str, Any] | None = None  # RotaScheduler's last published counters
        self._exported: dict[str, int] = {}  # plugin counters already added to /metrics
        self._abandoned = 0  # requests counted aborted by a drain that timed out, whose streams end later
        self.engine_url = ""
        self.admitting = True
        self._inflight = 0
        self.waiting_first = 0  # streamed requests sent to the engine, still without a first token
        self.predictor = WaitPredictor() if cfg.get("slo", "shed_at_admission") else None
        self.counts = {"arrived": 0, "finished": 0, "rejected": 0, "shed": 0, "aborted": 0, "failed": 0}
        self.scraped: dict[str, float] = {}
        self.num_blocks: int | None = None
        self._client = None
        self._monitor: asyncio.Task | None = None
        self.host: Host | None = None

    def model_name(self) -> str:
        return self.served

    def block_bytes(self) -> int | None:
        return self._block_bytes

    def command(self, port: int, params_file: Path) -> list[str]:
        return vllm_command(self.cfg.get, self.model_path, self.served, port, params_file, self._block_bytes,
                            self.world, self.tp, self.pp, self.executor)

    async def start(self, host: Host) -> None:
        import httpx

        self.host = host
        port = host.cfg.d("engine_port") or free_port()
        self.engine_url = f"http://127.0.0.1:{port}"
        env = dict(os.environ)
        if self.cfg.get("engine", "tiny_model"):  # a local model: nothing to fetch, nothing to report home
            for key in ("HF_HUB_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
                env.setdefault(key, "1")
        try:  # Ray installed when asked for; the CPU thread binding of several CPU ranks
            self.cpu_binding = parallel.prepare_env(self.world, self.executor, self.cfg.d("device"), env)
        except ValueError as exc:
            raise StartError(str(exc), code=2) from None
        parallel.export_layout(host.metrics.registry, self.tp, self.pp)
        env.update(wiring(self.cfg.get, host.store.path).env)  # lvf-hbm, no host pool: the plugin reads these
        cmd = self.command(port, host.store.path)
        log.info("starting vLLM on %s: %s", self.engine_url, " ".join(cmd))
        log.info("serving model %r (from %s): clients send \"model\": %s", self.served, self.model_path,
                 json.dumps(self.served))
        # A CPU engine's OpenMP threads fill every core they may use; at the daemon's priority they starved its
        # event loop for 0.5-2 s at a time under overload (two cores, 2x capacity: stalls logged with stacks all
        # over httpx and starlette, i.e. descheduled), and every deadline, stream and /v1/state waited.
        nice = self.cfg.get("engine", "cpu_nice") if parallel.is_cpu(self.cfg.d("device")) else 0
        if nice:
            log.info("vLLM on CPU runs at nice +%d (engine.cpu_nice): the daemon keeps its share of the cores", nice)
        self.child.spawn(cmd, env, nice=nice)
        # Idle connections to the child expire before vLLM's uvicorn closes them (VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
        # 5 s by default, httpx's own default expiry too): otherwise a request forwarded on a connection the
        # child is closing fails with a transport error (502 here) without reaching the engine.
        # One connection per request the daemon admits (engine.max_inflight, + scrapes): every admitted request is
        # in the engine at once, where the scheduler ranks it, and none waits unseen in this pool past its deadline.
        inflight = self.cfg.get("engine", "max_inflight")
        raise_open_files(2 * inflight + 256)  # each proxied request holds the client's socket and the engine's
        self._client = httpx.AsyncClient(base_url=self.engine_url, timeout=httpx.Timeout(None, connect=10.0),
                                         limits=httpx.Limits(max_connections=inflight + 8, max_keepalive_connections=64,
                                                             keepalive_expiry=ENGINE_KEEPALIVE_S))
        deadline = time.monotonic() + self.cfg.get("engine", "startup_timeout_s")
        while True:
            self.beat = time.monotonic()  # loading is progress while the child lives
            if self.child.exited():
                raise StartError(await asyncio.to_thread(self.child.failure, f"while loading {self.model_path}"))
            if time.monotonic() > deadline:
                raise StartError(f"vLLM did not become healthy within {self.cfg.get('engine', 'startup_timeout_s')} s")
            try:
                if (await self._client.get("/health", timeout=2.0)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
        await self._scrape()
        self.child.ready()
        log.info("vLLM ready: %s with RotaScheduler + DuplexKVConnector (%s KV blocks)", self.served,
                 self.num_blocks if self.num_blocks is not None else "?")
        self._monitor = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            if self.child.exited():
                self.crashed = RuntimeError(await asyncio.to_thread(self.child.failure))
                log.error("%s", self.crashed)
                return
            try:
                await self._scrape()
                self.beat = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - a missed scrape is not fatal; the heartbeat ages
                log.debug("vLLM metrics scrape failed: %s", exc)
            await asyncio.sleep(2.0)

    async def _scrape(self) -> None:
        r = await self._client.get("/metrics", timeout=5.0)
        values: dict[str, float] = {}
        for name, labels, value in _METRIC_RE.findall(r.text):
            if name == "vllm:cache_config_info" and labels:
                m = re.search(r'num_gpu_blocks="(\d+)"', labels)
                if m:
                    self.num_blocks = int(m.group(1))
            values[name] = values.get(name, 0.0) + (float(value) if value != "NaN" else 0.0)
        self.scraped = values
        self.plugin = self.child.stats()
        m = self.host.metrics
        m.queue.labels("waiting").set(values.get("vllm:num_requests_waiting", 0))
        m.queue.labels("running").set(values.get("vllm:num_requests_running", 0))
        if self.num_blocks:
            m.blocks_cap.labels("hbm").set(self.num_blocks)
            m.blocks_used.labels("hbm").set(round(values.get("vllm:kv_cache_usage_perc", 0.0) * self.num_blocks))
        self._export_plugin(m)

    def _export_plugin(self, m: Any) -> None:
        """RotaScheduler's counters into ``/metrics`` (queues and host pool set, counters advanced)."""
        p = plugin_view(self.plugin)
        for phase, n in p.get("queues", {}).items():
            m.queue.labels(phase).set(n)
        if "dram" in p:
            m.blocks_used.labels("dram").set(p["dram"]["used"])
            m.blocks_cap.labels("dram").set(p["dram"]["total"])
        for key, metric in (("preemptions", m.preemptions), ("rotations", m.rotations),
                            ("recompute_fallbacks", m.recompute)):
            now = p.get("counters", {}).get(key)
            if now is not None and now > self._exported.get(key, 0):
                metric.inc(now - self._exported.get(key, 0))
                self._exported[key] = now

    def register_routes(self, app: FastAPI, host: Host) -> None:
        backend = self
        self.limit = TenantLimit(self.tenants, host.metrics, host.slo)

        @app.get("/v1/models", tags=["openai"])
        async def models() -> Response:
            if backend._client is None:
                return error(503, "engine is starting", "unavailable")
            r = await backend._client.get("/v1/models")
            return Response(r.content, status_code=r.status_code, media_type="application/json")

        async def proxy(request: Request) -> Response:
            try:
                body = await json_body(request)
                if not isinstance(body, dict):
                    raise HttpError(400, "expected a JSON object")
                tenant = resolve_tenant(body, backend.tenant_index, backend.tenants[0].name,
                                        host.cfg.get("slo", "unknown_tenant"))
            except HttpError as exc:
                return exc.response()
            model = body.get("model")
            if model is not None and not isinstance(model, str):
                return error(400, f"model: expected a string, got {type(model).__name__}", param="model")
            if model is not None and model not in backend.aliases:
                host.metrics.rejected.labels(tenant, "unknown_model").inc()
                return error(404, f"model {model!r} is not served here; this daemon serves {backend.served!r} "
                             "(GET /v1/models)", "model_not_found", param="model")
            body["model"] = backend.served
            if not host.ready or backend._client is None:
                return error(503, "engine is starting", "unavailable", headers={"Retry-After": "5"})
            if not backend.admitting or host.draining:
                return error(503, "draining: the daemon is shutting down", "unavailable", headers={"Retry-After": "5"})
            if backend._inflight >= host.cfg.get("engine", "max_inflight"):
                host.metrics.rejected.labels(tenant, "overloaded").inc()
                return error(503, "overloaded: too many requests in flight", "unavailable", headers={"Retry-After": "1"})
            refused = shed_at_admission(backend.predictor, backend.tenants[backend.tenant_index[tenant]],
                                        host.metrics, host.slo)
            refused = refused or backend.limit.enter(tenant)
            if refused is not None:
                return refused
            xargs = dict(body.get(XARGS_FIELD) or {})
            xargs[TENANT_XARG] = tenant
            body[XARGS_FIELD] = xargs
            return await backend._forward(request.url.path, body, tenant)

        for path in PROXIED:
            app.add_api_route(path, proxy, methods=["POST"], tags=["openai"],
                              summary=f"vLLM {path} (proxied; tenant from {XARGS_FIELD}.{TENANT_XARG})")

    async def _forward(self, path: str, body: dict, tenant: str) -> Response:
        import httpx

        m = self.host.metrics
        self._inflight += 1
        self.counts["arrived"] += 1
        m.t_arrived[tenant].inc()
        t0 = time.monotonic()
        if not body.get("stream"):
            try:
                r = await self._client.post(path, json=body)
            except httpx.HTTPError as exc:
                self._done("failed", tenant)
                return error(502, f"engine unreachable: {exc}", "bad_gateway")
            self._done(outcome_of(r.status_code), tenant)
            if r.status_code == 200:
                m.t_finished[tenant].inc()
                try:
                    n = int(r.json().get("usage", {}).get("completion_tokens", 0))
                    m.t_tokens[tenant].inc(n)
                except ValueError:
                    pass
            return Response(r.content, status_code=r.status_code, media_type="application/json")

        return await stream_completion(self, path, body, tenant, t0)

    def _done(self, outcome: str, tenant: str) -> None:
        """An admitted request of ``tenant`` ended with ``outcome`` (called once per request)."""
        self._inflight -= 1
        self.limit.leave(tenant)
        if self._abandoned > 0 and outcome != "finished":
            self._abandoned -= 1  # counted as aborted when the drain gave up on it
            return
        self.counts[outcome] += 1
        if outcome == "rejected":
            self.host.metrics.rejected.labels(tenant, "engine").inc()

    def engine_state(self) -> dict[str, Any]:
        """Queues and KV from vLLM's /metrics, overlaid with RotaScheduler's published counters (rotary
        queue, host pool, rotations) once it has published them."""
        v = self.scraped
        used = round(v.get("vllm:kv_cache_usage_perc", 0.0) * self.num_blocks) if self.num_blocks else None
        p = plugin_view(self.plugin)
        queues = {"waiting": int(v.get("vllm:num_requests_waiting", 0)), "rotary": None,
                  "running": int(v.get("vllm:num_requests_running", 0)), **p.get("queues", {})}
        counters = {"preemptions": int(v.get("vllm:num_preemptions_total", 0)), **p.get("counters", {}), **self.counts}
        return {
            "queues": {**queues, "inflight_http": self._inflight},
            "kv": {"block_size": self.cfg.get("engine", "block_size"), "block_bytes": self._block_bytes,
                   "hbm": {"used": used, "total": self.num_blocks},
                   "dram": p.get("dram", {"used": None, "total": None})},
            "transfer": {"h2d": None, "d2h": None, "window_s": None},
            "counters": counters,
            "ranking": p.get("ranking", []),
            "rotation_events": [],
            "planner": None,
            "parallel": parallel.layout_state(self.tp, self.pp, self.executor, binding=self.cpu_binding,
                                              block_bytes_per_rank=self._block_bytes),
            "engine": {"url": self.engine_url, "pid": self.child.pid, "plugin": self.plugin,
                       "scraped": {k: v[k] for k in sorted(v) if k.startswith("vllm:num_") or "usage" in k}},
        }

    def counters(self) -> dict[str, int]:
        return dict(self.counts)

    def inflight(self) -> int:
        return self._inflight

    def stop_admission(self) -> None:
        self.admitting = False

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while self._inflight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = self._inflight
        if left:
            log.warning("drain deadline (%.1f s) passed with %d requests in flight; stopping vLLM", timeout_s, left)
            self.counts["aborted"] += left
            self._abandoned = left  # their streams end when vLLM stops: not counted a second time
        await self._stop_child()
        return {"aborted": left, "counters": self.counters()}

    async def _stop_child(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        await self.child.stop()

    async def close(self) -> None:
        await self._stop_child()
        if self._client is not None:
            await self._client.aclose()
