"""``superinferd start``: wire config, state dir, probe, params, backend, control API, signals, systemd.

Startup order: choose the backend (config errors exit 2 before anything is touched) -> lock the state
dir (a second daemon exits 1) -> api-token -> bandwidth probe (unless ``scheduler.b_xfer`` is fixed) ->
params (restored from ``state.json`` when the profile's scheduler section is unchanged) -> control API
listening -> backend started (the vLLM child loads its model meanwhile; ``/healthz`` says ``starting``) ->
``READY=1``. SIGTERM/SIGINT: stop admission, drain up to ``engine.drain_timeout_s``, persist
``state.json``, stop the API, exit 0. WATCHDOG=1 is sent by the event loop only while the engine loop's
heartbeat is fresh, so a stuck engine or a stuck event loop both stop the pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import time
from typing import Any

import uvicorn

from superinfer import __version__
from superinfer.daemon import lifecycle as lc
from superinfer.daemon.api import build_app
from superinfer.daemon.backends.base import Backend
from superinfer.daemon.backends.select import select_backend
from superinfer.daemon.config import Config
from superinfer.daemon.errors import StartError
from superinfer.daemon.loop_health import StallWatch, watch_loop_lag
from superinfer.daemon.metrics import DaemonMetrics
from superinfer.daemon.notify import Notifier, watchdog_interval_s
from superinfer.daemon.params import ParamStore
from superinfer.daemon.startup import initial_params, persist, probe_bandwidth
from superinfer.daemon.stats import SloWindow
from superinfer.daemon.tuner_metrics import TunerMetrics
from superinfer.daemon.tuning import TunerError, TunerService
from superinfer.daemon.wire import STATE_SCHEMA_VERSION
from superinfer.jsonfile import write_json_atomic

log = logging.getLogger("superinfer.daemon")
STALL_S = 30.0  # an engine loop silent this long is stalled (watchdog pings stop, /healthz 503)
#: seconds an idle keep-alive connection is kept open. It must exceed the idle expiry of the clients'
#: connection pools, or the server closes a connection just as a client reuses it for a new request,
#: which then fails on the client (httpx ``ReadError``/``RemoteProtocolError``) without ever reaching the
#: engine. uvicorn's default (5 s) equals httpx's and the OpenAI SDK's ``keepalive_expiry`` (5 s), so
#: that race lost about one load-test request in three runs; 75 s also outlasts aiohttp (15 s) and
#: nginx upstream keep-alive (60 s). Clients that keep idle connections longer (Go: 90 s) still race.
KEEP_ALIVE_S = 75


class Daemon:
    """Everything one running daemon shares between the API, the backend and the lifecycle.

    It satisfies :class:`~superinfer.daemon.backends.base.Host` (what a backend sees) and
    :class:`~superinfer.daemon.api.ControlHost` (what the control API sees) structurally; neither of
    those modules imports this one. ``store`` is set by :func:`run` before serving starts.
    """

    def __init__(self, cfg: Config, backend: Backend) -> None:
        self.cfg = cfg
        self.backend = backend
        self.log = log
        self.state_dir = cfg.state_dir
        self.started = time.monotonic()
        self.started_unix = time.time()
        self.draining = False
        self.ready = False
        self.failure: str | None = None  # why the backend failed to start (its root cause), once it has
        self.selfload: Any = None  # the [load] client (superinfer.daemon.selfload.SelfLoad), when it runs
        self.token = ""
        self.probe: dict[str, Any] | None = None
        self.store: ParamStore
        self.tuner: TunerService | None = None  # set by run() once the store exists
        self.metrics = DaemonMetrics([t.name for t in cfg.tenants], backend=backend.name, profile=cfg.profile,
                                     model=backend.model_name(), simulation=backend.simulation)
        self.slo = SloWindow([t.name for t in cfg.tenants], cfg.get("slo", "window_s"))
        self.port = cfg.d("port")

    def health(self) -> str:
        """``failed`` (the engine loop died), ``draining``, ``starting``, ``stalled`` (no heartbeat for
        :data:`STALL_S`) or ``ok``, in that precedence."""
        if self.error() is not None:
            return "failed"
        if self.draining:
            return "draining"
        if not self.ready:
            return "starting"
        if time.monotonic() - self.backend.beat > STALL_S:
            return "stalled"
        return "ok"

    def error(self) -> str | None:
        """Why the engine failed (a failed start, or its loop or process died), None while it has not."""
        if self.failure is not None:
            return self.failure
        return None if self.backend.crashed is None else str(self.backend.crashed)

    def state(self) -> dict[str, Any]:
        """The ``/v1/state`` document (field names: docs/daemon.md)."""
        b = self.backend
        tenants = {t.name: {"ttft_slo_s": t.ttft_slo, "tbt_slo_s": t.tbt_slo, "weight": t.weight,
                            "priority": t.priority} for t in self.cfg.tenants}
        window = self.slo.summary()
        for name, w in window.items():
            tenants[name]["window"] = w
        for name, shed in self.metrics.shed_by_tenant().items():
            if name in tenants:
                tenants[name]["shed"] = shed  # since the start, by reason
        out: dict[str, Any] = {
            "schema_version": STATE_SCHEMA_VERSION,
            "backend": b.name,
            "simulation": b.simulation,
            "status": self.health(),
            "error": self.error(),
            "version": __version__,
            "pid": os.getpid(),
            "model": b.model_name(),
            "profile": self.cfg.profile,
            "profile_path": str(self.cfg.profile_path),
            "uptime_s": round(time.monotonic() - self.started, 3),
            "started_at": self.started_unix,
            "params": self.store.snapshot(),
            "probe": self.probe,
            "slo_window_s": self.slo.window_s,
            "tenants": tenants,
            "tuner": self.tuner.status() if self.tuner is not None else None,
            "load": None if self.selfload is None else {"rps": self.selfload.rps, **self.selfload.counts},
        }
        out.update(b.engine_state())
        return out

    def status_line(self) -> str:
        c = self.backend.counters()
        sim = "SIMULATION " if self.backend.simulation else ""
        live = c.get("arrived", 0) - c.get("finished", 0) - c.get("rejected", 0) - c.get("aborted", 0)
        return (f"{sim}{self.cfg.profile}/{self.backend.name}: {live} live ({self.backend.inflight()} over HTTP), "
                f"{c.get('arrived', 0)} arrived, {c.get('finished', 0)} finished")


def make_server(config: uvicorn.Config) -> uvicorn.Server:
    """uvicorn's Server without its own signal handling (the daemon drains first, then stops it)."""

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            yield

    return Server(config)


class Serving:
    """One run of the serving loop, in uvicorn's shape: :meth:`startup` -> :meth:`main_loop` (one
    :meth:`tick` per wake-up) -> :meth:`shutdown`; :meth:`serve` runs the three and returns the exit status.

    Invariants: the backend starts only once the control API listens; ``READY=1`` is sent once, when the
    backend's start returned; ``WATCHDOG=1`` is sent only from :meth:`tick` and only while the daemon is
    healthy (``ok`` or ``starting``); shutdown always stops admission, drains, persists ``state.json`` and
    stops the API, whatever ended the loop (a signal, a failed start, a crashed engine loop).
    """

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.notifier = Notifier()
        self.stop = asyncio.Event()
        self.exit_code = 0
        self.tick_s = min(watchdog_interval_s() or 2.0, 2.0)
        self.last_status = 0.0
        self.server: uvicorn.Server | None = None
        self.server_task: asyncio.Task | None = None
        self.start_task: asyncio.Task | None = None  # the backend's start, until it has finished
        self.stop_wait: asyncio.Task | None = None
        self.load_task: asyncio.Task | None = None  # the [load] client, while it sends
        self.lag_task: asyncio.Task | None = None  # samples the event loop's lag (its heartbeat)
        self.stall: StallWatch | None = None  # logs the loop's stack on a stall, once serving

    def _beat(self) -> None:
        if self.stall is not None:
            self.stall.beat()

    async def serve(self) -> int:
        await self.startup()
        await self.main_loop()
        await self.shutdown()
        return self.exit_code

    async def startup(self) -> None:
        """Listen (raises :class:`StartError` when the API cannot), write ``runtime.json``, start the backend."""
        d, cfg = self.daemon, self.daemon.cfg
        self.server = make_server(uvicorn.Config(
            build_app(d), host=cfg.d("host"), port=cfg.d("port"), log_level="warning", access_log=False,
            lifespan="off", timeout_graceful_shutdown=5, timeout_keep_alive=KEEP_ALIVE_S))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        self.server_task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            if self.server_task.done():
                exc = self.server_task.exception()
                raise StartError(f"control API could not listen on {cfg.d('host')}:{cfg.d('port')}: "
                                 f"{exc or 'uvicorn exited'}")
            await asyncio.sleep(0.02)
        d.port = int(self.server.servers[0].sockets[0].getsockname()[1])
        write_json_atomic(d.state_dir / lc.RUNTIME_FILE, {
            "pid": os.getpid(), "host": cfg.d("host"), "port": d.port, "profile": cfg.profile,
            "backend": d.backend.name, "simulation": d.backend.simulation, "started_at": d.started_unix,
            "url": f"http://{cfg.d('host')}:{d.port}"})
        log.info("control API on http://%s:%d (state /v1/state, metrics /metrics, OpenAPI /openapi.json)",
                 cfg.d("host"), d.port)
        self.notifier.status(f"starting backend {d.backend.name}")
        self.start_task = asyncio.create_task(d.backend.start(d))
        self.stop_wait = asyncio.create_task(self.stop.wait())
        self.lag_task = asyncio.create_task(watch_loop_lag(d.metrics.loop_lag.observe, beat=self._beat))

    async def main_loop(self) -> None:
        """Tick until a signal, a failed start or a crashed engine loop; wake on either event or every
        ``tick_s`` (at most 2 s, and at most the watchdog interval)."""
        while self.tick():
            waiters = [self.stop_wait] + ([self.start_task] if self.start_task is not None else [])
            await asyncio.wait(waiters, timeout=self.tick_s, return_when=asyncio.FIRST_COMPLETED)

    def tick(self) -> bool:
        """One turn: settle the backend's start, then ping systemd while healthy. False: shut down."""
        self._settle_start()
        if self.stop.is_set():
            return False
        if self.daemon.tuner is not None and self.daemon.ready and not self.daemon.draining:
            try:
                self.daemon.tuner.tick()
            except Exception:  # noqa: BLE001 - a tuner bug must not stop serving; it is logged
                log.exception("tuner tick failed")
        health = self.daemon.health()
        if health in ("ok", "starting") and self.notifier.enabled:
            self.notifier.watchdog()
            now = time.monotonic()
            if now - self.last_status >= 5.0:
                self.last_status = now
                self.notifier.status(self.daemon.status_line())
        if health == "failed":
            log.error("engine failed (%s); shutting down", self.daemon.error())
            self.exit_code = 1
            return False
        return True

    def _settle_start(self) -> None:
        """Once the backend's start has finished: READY=1, or the start's exit code and a stop."""
        task = self.start_task
        if task is None or not task.done():
            return
        self.start_task = None
        exc = task.exception()
        if exc is not None:
            log.error("backend %s failed to start: %s", self.daemon.backend.name, exc)
            self.daemon.failure = str(exc)
            self.exit_code = getattr(exc, "code", 1)
            self.stop.set()
            return
        self.daemon.ready = True
        # What the start left behind (torch, transformers, the engine's config: ~400 k objects) lives as long as
        # the daemon: out of the collector's sight, a full collection takes ~1 ms instead of 0.15 s (0.5 s on a
        # host whose cores the engine keeps busy), a stall every request in flight and /v1/state would wait out.
        gc.collect()
        gc.freeze()
        self.stall = StallWatch()  # from now on (the start itself may hold the loop: building the model)
        self.notifier.ready(self.daemon.status_line())
        log.info("ready: %s", self.daemon.status_line())
        self.load_task = self._start_load()

    def _start_load(self) -> asyncio.Task | None:
        """``[load]``: the daemon's own client (:mod:`superinfer.daemon.selfload`), when ``load.rps > 0``."""
        d, g = self.daemon, self.daemon.cfg.get
        if g("load", "rps") <= 0:
            return None
        from superinfer.daemon.selfload import SelfLoad

        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(d.cfg.d("host"), d.cfg.d("host"))
        load = SelfLoad(f"http://{f'[{host}]' if ':' in host else host}:{d.port}", d.backend.model_name(),
                        [(t.name, d.cfg.tenant_shares.get(t.name, 1.0)) for t in d.cfg.tenants], rps=g("load", "rps"),
                        prompt_words=g("load", "prompt_words"), max_tokens=g("load", "max_tokens"),
                        max_inflight=g("load", "max_inflight"), seed=g("load", "seed"))
        d.selfload = load
        log.info("load: sending %g req/s to this daemon's /v1/completions (prompts <= %d words, <= %d tokens out)",
                 load.rps, load.prompt_words, load.max_tokens)
        return asyncio.create_task(load.run(lambda: not d.draining))

    async def shutdown(self) -> None:
        """Stop admission, drain up to ``engine.drain_timeout_s``, persist, stop serving, close the backend."""
        d = self.daemon
        d.draining = True
        d.metrics.draining.set(1)
        timeout = d.cfg.get("engine", "drain_timeout_s")
        log.info("shutting down: admission stopped, draining (up to %.0f s): %s", timeout, d.status_line())
        self.notifier.stopping(f"draining {d.backend.inflight()} requests")
        if self.start_task is not None:
            self.start_task.cancel()
            with contextlib.suppress(BaseException):
                await self.start_task
        if d.tuner is not None:
            d.tuner.stop()  # a running trial is written back before the params are persisted
        d.backend.stop_admission()
        drain = None
        try:
            drain = await d.backend.drain(timeout)
        except Exception:  # noqa: BLE001 - still persist and exit
            log.exception("drain failed")
            self.exit_code = self.exit_code or 1
        for task in (self.load_task, self.lag_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self.stall is not None:
            self.stall.stop()
        path = persist(d.state_dir / lc.STATE_FILE, d.cfg, d.backend, d.store, time.monotonic() - d.started, drain,
                       error=d.error())
        log.info("state persisted to %s: %s", path, d.backend.counters())
        self.stop_wait.cancel()
        self.server.should_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.server_task, timeout=10)
        await d.backend.close()
        self.notifier.close()


async def serve(daemon: Daemon) -> int:
    """Serve until a signal or a failure; returns the exit status (see :class:`Serving`)."""
    return await Serving(daemon).serve()


def run(cfg: Config) -> int:
    """Start in the foreground; returns the exit status (0 ok, 1 failure, 2 configuration)."""
    running = lc.running_daemon(cfg.state_dir)
    if running is not None:  # before the preflight, which would otherwise measure that daemon's memory
        raise lc.AlreadyRunning(cfg.state_dir, running.pid)
    backend = select_backend(cfg)
    lc.ensure_state_dir(cfg.state_dir)
    lock = lc.PidLock(cfg.state_dir)
    lock.acquire()  # AlreadyRunning propagates to the CLI
    try:
        daemon = Daemon(cfg, backend)
        daemon.token = lc.api_token(cfg.state_dir)
        log.info("superinferd %s: profile %s (%s), backend %s, state dir %s", __version__, cfg.profile,
                 cfg.profile_path, backend.name, cfg.state_dir)
        if cfg.get("scheduler", "b_xfer") == "auto":
            daemon.probe = probe_bandwidth(cfg, backend.block_bytes())
            if daemon.probe is not None:
                daemon.metrics.set_probe(daemon.probe)
        daemon.store = initial_params(cfg, backend, daemon.probe, daemon.state_dir)
        daemon.store.listeners.append(backend.on_params)
        daemon.store.listeners.append(lambda v: daemon.metrics.set_params(v, int(v["b_xfer"]), daemon.store.version))
        daemon.metrics.set_params(daemon.store.values, int(daemon.store.values["b_xfer"]), daemon.store.version)
        try:
            daemon.tuner = TunerService(cfg, daemon.store, TunerMetrics(daemon.metrics.registry, cfg.get("tuner", "knobs")))
        except (TunerError, ValueError) as exc:
            raise StartError(f"configuration error: {exc}", code=2) from None
        return asyncio.run(serve(daemon))
    finally:
        with contextlib.suppress(FileNotFoundError):
            (cfg.state_dir / lc.RUNTIME_FILE).unlink()
        lock.release()
