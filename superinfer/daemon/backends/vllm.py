"""The ``vllm`` backend: vLLM's OpenAI server as a child process, with the superinfer plugin wired in.

The child (``python -m vllm.entrypoints.openai.api_server``) listens on loopback only
(``--engine-port``, default a free port) with ``--scheduler-cls superinfer.vllm.RotaScheduler``, the
``DuplexKVConnector`` KV connector, ``--no-async-scheduling`` and the profile's engine settings; it reads
live params from ``<state-dir>/params.json`` (``SUPERINFER_PARAMS_FILE``), which the daemon rewrites
atomically on every ``PUT /v1/params``. Clients talk to the daemon's port: ``/v1/completions``,
``/v1/chat/completions`` and ``/v1/models`` are proxied to the child after the tenant is resolved
(``vllm_xargs.tenant``; unknown -> default tenant or 400, per profile) and the daemon times streamed
tokens per tenant. Invariants: the child dies with the daemon (``PR_SET_PDEATHSIG``); after
:meth:`stop_admission` new requests get 503 while in-flight ones finish; the child is stopped only after
the drain.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from superinfer.daemon import parallel
from superinfer.daemon.backends.base import Backend, Host
from superinfer.daemon.errors import StartError
from superinfer.daemon.httputil import HttpError, error, json_body, resolve_tenant
from superinfer.daemon.wire import TENANT_XARG, XARGS_FIELD

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.daemon.config import Config

log = logging.getLogger("superinfer.daemon")
PROXIED = ("/v1/completions", "/v1/chat/completions")
ENGINE_KEEPALIVE_S = 2.0  # idle expiry of the proxy's connections to the vLLM child (below its 5 s keep-alive)
_METRIC_RE = re.compile(r"^(vllm:[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def hf_block_bytes(model_path: str, block_size: int, dtype: str) -> int | None:
    """KV bytes of one block from the model's config.json (None if it cannot be read)."""
    try:
        c = json.loads((Path(model_path) / "config.json").read_text())
        heads = c["num_attention_heads"]
        kv_heads = c.get("num_key_value_heads", heads)
        head_dim = c.get("head_dim") or c["hidden_size"] // heads
        width = {"float32": 4}.get(dtype if dtype != "auto" else c.get("torch_dtype", "bfloat16"), 2)
        return 2 * c["num_hidden_layers"] * kv_heads * head_dim * width * block_size
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def is_token_event(line: str) -> bool:
    """Whether one line of vLLM's SSE stream carries output: a ``data:`` event other than ``[DONE]``, the
    usage-only event (``stream_options.include_usage``: ``"choices":[]``) and the chat stream's opening
    role event (``"delta":{"role":"assistant","content":""}``, sent just before the first token's). vLLM
    sends one such event per engine step that produced text for the request, so the proxy times events,
    not tokens: steps whose text vLLM holds back (stop strings, tool or reasoning parsers) merge into the
    next event. vLLM serializes compactly, and a quote inside a string is escaped, so the substrings
    match only JSON keys."""
    return (line.startswith("data: ") and line != "data: [DONE]" and '"choices":[]' not in line
            and '"role":' not in line)


class VllmBackend(Backend):
    name = "vllm"
    simulation = False

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        g = cfg.get
        self.model_path = g("engine", "model_path")
        self.served = g("engine", "served_model_name") or self.model_path
        self.tp, self.pp = g("engine", "tensor_parallel_size"), g("engine", "pipeline_parallel_size")
        self.executor = g("engine", "distributed_executor_backend")
        self.world = self.tp * self.pp
        self.cpu_binding: str | None = None
        # one rank's KV block (its heads, its stage's layers): what each worker parks, and B_xfer's unit
        self._block_bytes = (hf_block_bytes(self.model_path, g("engine", "block_size"), g("engine", "dtype"))
                             if self.world == 1 else parallel.rank_block_bytes(
                                 self.model_path, g("engine", "block_size"), g("engine", "dtype"), self.tp, self.pp))
        self.tenant_index = {t.name: i for i, t in enumerate(cfg.tenants)}
        self.tenants = cfg.tenants
        self.proc: subprocess.Popen | None = None
        self.engine_url = ""
        self.admitting = True
        self._inflight = 0
        self.counts = {"arrived": 0, "finished": 0, "rejected": 0, "aborted": 0, "failed": 0}
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
        g = self.cfg.get
        extra: dict[str, Any] = {"params_file": str(params_file), "policy": g("scheduler", "policy")
                                 if g("scheduler", "policy") != "vllm" else "fcfs"}
        if self._block_bytes:  # dram_gib is the whole engine's pool: each of the world's workers gets its share
            extra["host_blocks"] = max(1, int(g("engine", "dram_gib") * (1 << 30)) // (self.world * self._block_bytes))
        ktc = {"kv_connector": "DuplexKVConnector", "kv_connector_module_path": "superinfer.vllm",
               "kv_role": "kv_both", "kv_connector_extra_config": extra}
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_path,
               "--served-model-name", self.served, "--host", "127.0.0.1", "--port", str(port),
               "--scheduler-cls", "superinfer.vllm.RotaScheduler", "--kv-transfer-config", json.dumps(ktc),
               "--no-async-scheduling", "--block-size", str(g("engine", "block_size")),
               "--max-num-seqs", str(g("engine", "max_num_seqs")),
               "--max-num-batched-tokens", str(g("engine", "max_num_batched_tokens")),
               "--dtype", g("engine", "dtype"), "--gpu-memory-utilization", str(g("engine", "gpu_memory_utilization"))]
        if g("engine", "max_model_len"):
            cmd += ["--max-model-len", str(g("engine", "max_model_len"))]
        if g("engine", "num_gpu_blocks_override"):
            cmd += ["--num-gpu-blocks-override", str(g("engine", "num_gpu_blocks_override"))]
        if g("engine", "enforce_eager"):
            cmd.append("--enforce-eager")
        return cmd + parallel.vllm_args(self.tp, self.pp, self.executor)

    async def start(self, host: Host) -> None:
        import httpx

        self.host = host
        port = host.cfg.d("engine_port") or free_port()
        self.engine_url = f"http://127.0.0.1:{port}"
        env = dict(os.environ)
        env["SUPERINFER_PARAMS_FILE"] = str(host.store.path)
        try:  # Ray installed when asked for; the CPU thread binding of several CPU ranks
            self.cpu_binding = parallel.prepare_env(self.world, self.executor, self.cfg.d("device"), env)
        except ValueError as exc:
            raise StartError(str(exc), code=2) from None
        parallel.export_layout(host.metrics.registry, self.tp, self.pp)
        if self.cfg.get("engine", "kv_cache_gib"):
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.cfg.get('engine', 'kv_cache_gib'):g}"
        cmd = self.command(port, host.store.path)
        log.info("starting vLLM on %s: %s", self.engine_url, " ".join(cmd))
        self.proc = subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent)
        # Idle connections to the child expire before vLLM's uvicorn closes them (VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
        # 5 s by default, httpx's own default expiry too): otherwise a request forwarded on a connection the
        # child is closing fails with a transport error (502 here) without reaching the engine.
        self._client = httpx.AsyncClient(base_url=self.engine_url, timeout=httpx.Timeout(None, connect=10.0),
                                         limits=httpx.Limits(max_connections=100, max_keepalive_connections=20,
                                                             keepalive_expiry=ENGINE_KEEPALIVE_S))
        deadline = time.monotonic() + self.cfg.get("engine", "startup_timeout_s")
        while True:
            self.beat = time.monotonic()  # loading is progress while the child lives
            if self.proc.poll() is not None:
                raise StartError(f"vLLM exited with {self.proc.returncode} while loading {self.model_path}")
            if time.monotonic() > deadline:
                raise StartError(f"vLLM did not become healthy within {self.cfg.get('engine', 'startup_timeout_s')} s")
            try:
                if (await self._client.get("/health", timeout=2.0)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
        await self._scrape()
        log.info("vLLM ready: %s with RotaScheduler + DuplexKVConnector (%s KV blocks)", self.served,
                 self.num_blocks if self.num_blocks is not None else "?")
        self._monitor = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                self.crashed = RuntimeError(f"vLLM exited with {self.proc.returncode}")
                log.error("vLLM child exited with %s", self.proc.returncode)
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
        m = self.host.metrics
        m.queue.labels("waiting").set(values.get("vllm:num_requests_waiting", 0))
        m.queue.labels("running").set(values.get("vllm:num_requests_running", 0))
        if self.num_blocks:
            m.blocks_cap.labels("hbm").set(self.num_blocks)
            m.blocks_used.labels("hbm").set(round(values.get("vllm:kv_cache_usage_perc", 0.0) * self.num_blocks))

    def register_routes(self, app: FastAPI, host: Host) -> None:
        backend = self

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
            if not host.ready or backend._client is None:
                return error(503, "engine is starting", "unavailable", headers={"Retry-After": "5"})
            if not backend.admitting or host.draining:
                return error(503, "draining: the daemon is shutting down", "unavailable", headers={"Retry-After": "5"})
            if backend._inflight >= host.cfg.get("engine", "max_inflight"):
                host.metrics.rejected.labels(tenant, "overloaded").inc()
                return error(503, "overloaded: too many requests in flight", "unavailable", headers={"Retry-After": "1"})
            xargs = dict(body.get(XARGS_FIELD) or {})
            xargs[TENANT_XARG] = tenant
            body[XARGS_FIELD] = xargs
            return await backend._forward(request.url.path, body, tenant)

        for path in PROXIED:
            app.add_api_route(path, proxy, methods=["POST"], tags=["openai"],
                              summary=f"vLLM {path} (proxied; tenant from {XARGS_FIELD}.{TENANT_XARG})")

    async def _forward(self, path: str, body: dict, tenant: str) -> Response:
        import httpx

        h = self.host
        m = h.metrics
        slo = self.tenants[self.tenant_index[tenant]]
        self._inflight += 1
        self.counts["arrived"] += 1
        m.t_arrived[tenant].inc()
        t0 = time.monotonic()
        if not body.get("stream"):
            try:
                r = await self._client.post(path, json=body)
            except httpx.HTTPError as exc:
                self._done("failed")
                return error(502, f"engine unreachable: {exc}", "bad_gateway")
            self._done("finished" if r.status_code == 200 else "failed")
            if r.status_code == 200:
                m.t_finished[tenant].inc()
                try:
                    n = int(r.json().get("usage", {}).get("completion_tokens", 0))
                    m.t_tokens[tenant].inc(n)
                except ValueError:
                    pass
            return Response(r.content, status_code=r.status_code, media_type="application/json")

        tuner = h.tuner
        if tuner is not None:  # only streamed requests are timed, so only they are reported to the tuner
            prompt = body.get("prompt", body.get("messages", ""))
            tuner.arrival(t0, tenant, len(prompt) if isinstance(prompt, list) else max(len(str(prompt)) // 4, 1))

        async def stream():
            first = last = None
            ttft_ok: bool | None = None
            gaps: list[float] = []
            outcome = "failed"
            try:
                async with self._client.stream("POST", path, json=body) as r:
                    async for line in r.aiter_lines():
                        if is_token_event(line):
                            now = time.monotonic()
                            if first is None:
                                first = now
                                ttft = now - t0
                                ttft_ok = ttft <= slo.ttft_slo
                                m.observe_first_token(tenant, ttft, ttft_ok)
                                h.slo.first_token(tenant, ttft, ttft_ok)
                                if tuner is not None:
                                    tuner.first_token(t0, tenant, ttft_ok)
                            else:
                                gap = now - last
                                gaps.append(gap)
                                m.observe_gap(tenant, gap, gap <= slo.tbt_slo)
                            last = now
                            m.t_tokens[tenant].inc()
                        yield line + "\n"
                    outcome = "finished" if r.status_code == 200 else "failed"
            finally:
                # gaps enter the SLO window when the stream ends, finished or not (all were observed)
                h.slo.gaps(tenant, gaps, slo_s=slo.tbt_slo)
                if outcome == "finished":
                    mean = sum(gaps) / len(gaps) if gaps else 0.0
                    m.observe_finished(tenant, mean <= slo.tbt_slo, ttft_ok)
                    h.slo.finished(tenant, mean, mean <= slo.tbt_slo, ttft_ok=ttft_ok)
                    if tuner is not None:
                        tuner.finished(t0, tenant, ttft_ok, mean <= slo.tbt_slo, len(gaps) + (first is not None))
                self._done(outcome)

        return StreamingResponse(stream(), media_type="text/event-stream")

    def _done(self, outcome: str) -> None:
        self._inflight -= 1
        self.counts[outcome] += 1

    def engine_state(self) -> dict[str, Any]:
        v = self.scraped
        used = round(v.get("vllm:kv_cache_usage_perc", 0.0) * self.num_blocks) if self.num_blocks else None
        return {
            "queues": {"waiting": int(v.get("vllm:num_requests_waiting", 0)), "rotary": None,
                       "running": int(v.get("vllm:num_requests_running", 0)), "inflight_http": self._inflight},
            "kv": {"block_size": self.cfg.get("engine", "block_size"), "block_bytes": self._block_bytes,
                   "hbm": {"used": used, "total": self.num_blocks}, "dram": {"used": None, "total": None}},
            "transfer": {"h2d": None, "d2h": None, "window_s": None},
            "counters": {**self.counts, "preemptions": int(v.get("vllm:num_preemptions_total", 0))},
            "ranking": [],
            "rotation_events": [],
            "planner": None,
            "parallel": parallel.layout_state(self.tp, self.pp, self.executor, binding=self.cpu_binding,
                                              block_bytes_per_rank=self._block_bytes),
            "engine": {"url": self.engine_url, "pid": self.proc.pid if self.proc else None,
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
        await self._stop_child()
        return {"aborted": left, "counters": self.counters()}

    async def _stop_child(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 10)

    async def close(self) -> None:
        await self._stop_child()
        if self._client is not None:
            await self._client.aclose()
