"""The online tuner inside the daemon: its feed, its clock, its writes, its log, its persistence.

:class:`TunerService` owns one :class:`superinfer.tuner.Controller` on the daemon's monotonic clock and
gives it exactly three things: request outcomes (backends call :meth:`arrival`, :meth:`first_token`,
:meth:`finished` with monotonic arrival times; the vllm backend reports only streamed requests, the ones
it can time), a writer (``ParamStore.update(values, source="tuner")``: the path ``PUT /v1/params``
takes, version bumped, params file rewritten, backends told), and ticks (:meth:`tick`, from the
serving loop every <= 2 s). It tells the controller when anyone else writes the params
(:meth:`on_params`, a ``ParamStore`` observer).

Files in the state dir: ``tuner-decisions.jsonl`` (append-only, one decision per line, ``at`` in Unix
seconds) and ``tuner.json`` (the controller's state, ``superinfer.tuner.snapshot``; written after each
decision that changes it and at shutdown, read at start). Thread-safe: the feed only appends to a
deque (the engine thread never waits for the tuner: it holds its own lock while it reports, and the
tuner's writes call into the backend, which takes that lock, so waiting here could deadlock); the
events are handed to the controller at the next tick, under one re-entrant lock that also guards the
API's reads and writes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from superinfer.core import budgeted
from superinfer.daemon.lifecycle import read_json
from superinfer.jsonfile import write_json_atomic
from superinfer.tuner import Controller, TunerConfig, load_arms
from superinfer.tuner.arms import ArmsError, empty_arms
from superinfer.tuner.decisions import Decision
from superinfer.tuner.fleet import Fleet, FleetThread, is_shared, redact
from superinfer.tuner.snapshot import dump, restore, status

if TYPE_CHECKING:
    from superinfer.daemon.config import Config
    from superinfer.daemon.params import ParamStore
    from superinfer.daemon.tuner_metrics import TunerMetrics

log = logging.getLogger("superinfer.tuner")
DECISIONS_FILE = "tuner-decisions.jsonl"
STATE_FILE = "tuner.json"
DB_FILE = "tuner.db"


class TunerError(ValueError):
    """A tuner setting the daemon cannot start with (bad arms file, bad storage): exit 2."""


def tuner_config(cfg: Config, b_xfer_max: int | None = None) -> TunerConfig:
    """The controller's settings from ``[tuner]``; ``b_xfer_max``: the host's measured transfer budget
    (``b_xfer``'s upper bound; None: not tuned). Derived, not profile keys: feature slots of a quarter
    window (at most 30 s), a settle of a quarter window (at most 10 s; at most two windows, at most 120 s,
    for the last censored requests), a per-tenant guard that
    needs a fifth of ``min_requests`` (5 to 30) on each side, and switchback trials of 8 slots whose
    per-switch warm-up is half of ``warmup_s`` (each side gets ``window_s`` of counted arrivals)."""
    g = cfg.get
    window, n = g("tuner", "window_s"), g("tuner", "min_requests")
    return TunerConfig(mode=g("tuner", "mode"), window_s=window, max_window_s=max(window, g("tuner", "max_window_s")),
                       warmup_s=g("tuner", "warmup_s"),
                       switch_warmup_s=g("tuner", "warmup_s") / 2,
                       slot_s=min(30.0, window / 4), settle_s=min(10.0, window / 4), max_settle_s=min(120.0, 2 * window),
                       guard_min_requests=max(5, min(30, n // 5)),
                       min_requests=g("tuner", "min_requests"), cooldown_s=g("tuner", "cooldown_s"),
                       trust_region=g("tuner", "trust_region"), knobs=tuple(g("tuner", "knobs")),
                       step_caps=dict(g("tuner", "step_caps")), guard_margin=g("tuner", "guard_margin"),
                       alpha=g("tuner", "alpha"), max_rollbacks_per_hour=g("tuner", "max_rollbacks_per_hour"),
                       explore_budget=g("tuner", "explore_budget"), arm_test=g("tuner", "arm_test"),
                       jump_gain=g("tuner", "jump_gain"), futility_margin=g("tuner", "futility_margin"),
                       seed=g("tuner", "seed"), b_xfer_max=b_xfer_max)


def storage_for(cfg: Config) -> str | None:
    """The local search's study: in memory, a local file (SQLite, journal), or, when the storage is a
    PostgreSQL server, the state dir's SQLite file: a database across the network is the fleet's
    (:func:`fleet_for`), reached off the serving path, so a server that is down never stops the daemon."""
    from superinfer.tuner.offline.study import open_storage

    spec = cfg.get("tuner", "storage")
    if spec == "memory":
        return None
    if spec == "" or spec.startswith(("postgresql://", "postgres://")):
        return f"sqlite:///{cfg.state_dir / DB_FILE}"
    try:
        open_storage(spec)
    except Exception as exc:  # noqa: BLE001 - any storage failure is a configuration error
        raise TunerError(f"tuner.storage {redact(spec)!r}: {type(exc).__name__}: {redact(str(exc))}") from None
    from superinfer.tuner.offline.study import storage_url

    return storage_url(spec)


def fleet_for(cfg: Config) -> Fleet | None:
    """The fleet's link when ``[tuner] storage`` names a database (docs/tuner.md, "Fleet"); the model is
    the served name (else the model directory's name, else the twin's model profile), the host id this
    machine's name and a hash of the state dir (several daemons may share a machine)."""
    spec = cfg.get("tuner", "storage")
    if not is_shared(spec):
        return None
    e = cfg.get
    model = e("engine", "served_model_name") or Path(e("engine", "model_path")).name or e("engine", "model")
    tag = hashlib.sha256(str(cfg.state_dir.resolve()).encode()).hexdigest()[:8]
    return Fleet(spec, model, f"{socket.gethostname()}/{tag}")


class TunerService:
    def __init__(self, cfg: Config, store: ParamStore, metrics: TunerMetrics | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.metrics = metrics
        self.state_dir = Path(cfg.state_dir)
        self.profile_mode = cfg.get("tuner", "mode")
        self._lock = threading.RLock()
        self._events: deque[tuple] = deque()
        path = cfg.get("tuner", "arms_file")
        try:
            arms = load_arms(path) if path else empty_arms()
        except ArmsError as exc:
            raise TunerError(f"tuner.arms_file: {exc}") from None
        # the budget at startup is the probe's measurement (or the profile's pin, or the backend's): the
        # most the tuner may set; a policy with no host tier (or a budget of 0) leaves b_xfer untuned
        b_max = int(store.values["b_xfer"]) if budgeted(cfg.get("scheduler", "policy")) else 0
        tcfg = tuner_config(cfg, b_max or None)
        tenants = {t.name: (t.ttft_slo, t.weight) for t in cfg.tenants}
        incumbent = {k: float(store.values[k]) for k in tcfg.knobs}
        now = time.monotonic()
        self.fleet = fleet_for(cfg)
        self.ctl = Controller(tcfg, tenants, incumbent, writer=self._write, arms=arms, now=now,
                              storage=storage_for(cfg), study_name=f"superinfer-online-{cfg.profile}",
                              on_decision=self._decided, fleet=self.fleet)
        notes = restore(self.ctl, read_json(self.state_dir / STATE_FILE), now, self.from_wall, self.profile_mode)
        for n in notes:
            log.info("%s", n)
        store.observers.append(self.on_params)
        self._sync_metrics(now)
        self._fleet_thread = None if self.fleet is None else FleetThread(self.fleet, time.monotonic)
        if self._fleet_thread is not None:
            log.info("tuner: fleet storage %s (host %s, model %s)", self.fleet.url, self.fleet.host, self.fleet.model)
            self._fleet_thread.start()

    # ---- clocks ---------------------------------------------------------------------------------
    @staticmethod
    def to_wall(t: float) -> float:
        return t + (time.time() - time.monotonic())

    @staticmethod
    def from_wall(t: float) -> float:
        return t - (time.time() - time.monotonic())

    # ---- the feed (any thread; never blocks) -------------------------------------------------------
    def arrival(self, t_arr: float, tenant: str, prompt_tokens: int) -> None:
        self._events.append((0, t_arr, tenant, prompt_tokens))

    def first_token(self, t_arr: float, tenant: str, ttft_ok: bool) -> None:
        self._events.append((1, t_arr, tenant, ttft_ok))

    def finished(self, t_arr: float, tenant: str, ttft_ok: bool | None, tbt_ok: bool, output_tokens: int) -> None:
        self._events.append((2, t_arr, tenant, ttft_ok, tbt_ok, output_tokens))

    def _drain(self) -> None:
        ctl, ev = self.ctl, self._events
        while ev:
            e = ev.popleft()
            if e[0] == 0:
                ctl.arrival(e[1], e[2], e[3])
            elif e[0] == 1:
                ctl.first_token(e[1], e[2], e[3])
            else:
                ctl.finished(e[1], e[2], e[3], e[4], e[5])

    # ---- the loop, the API ----------------------------------------------------------------------
    def tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._drain()
            self.ctl.tick(now)
            self._sync_metrics(now)

    def status(self) -> dict[str, Any]:
        with self._lock:
            out = status(self.ctl, time.monotonic(), self.to_wall)
        out["decision_log"] = str(self.state_dir / DECISIONS_FILE)
        out["fleet"] = None if self.fleet is None else self.fleet.status()
        return out

    def put(self, body: dict[str, Any], source: str) -> dict[str, Any]:
        """``PUT /v1/tuner``: ``mode`` and/or ``freeze`` (already validated by the API)."""
        now = time.monotonic()
        with self._lock:
            if "mode" in body:
                self.ctl.set_mode(body["mode"], now)
            if "freeze" in body:
                self.ctl.set_freeze(bool(body["freeze"]), now, f"PUT /v1/tuner by {source}")
            self._sync_metrics(now)
            self._save(now)
        return self.status()

    def on_params(self, values: dict[str, float | int], source: str, version: int) -> None:
        """A ``ParamStore`` observer: every accepted params change, with its source."""
        if self.metrics is not None:
            self.metrics.param_change(source)
        if source == "tuner":
            return
        now = time.monotonic()
        with self._lock:
            self.ctl.external_write({k: float(values[k]) for k in self.ctl.space.knobs}, source, now)
            self._sync_metrics(now)

    def stop(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._drain()
            self.ctl.stop(now)
            self._save(now)
        if self._fleet_thread is not None:
            self._fleet_thread.stop()

    # ---- internals ------------------------------------------------------------------------------
    def _write(self, values: dict[str, float | int]) -> None:
        self.store.update(values, source="tuner")
        log.info("tuner wrote params: %s", values)

    def _decided(self, d: Decision) -> None:
        line = json.dumps(d.as_dict(at=self.to_wall(d.t)), sort_keys=True)
        try:
            fd = os.open(self.state_dir / DECISIONS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "a") as f:
                f.write(line + "\n")
        except OSError as exc:
            log.error("cannot append to the tuner's decision log: %s", exc)
        if d.action not in ("hold", "propose"):
            log.info("tuner %s: %s", d.action, d.reason)
        if self.metrics is not None:
            self.metrics.decision(d)
        if d.action in ("accept", "reject", "rollback", "abort", "freeze", "unfreeze", "mode", "adopt", "jump",
                        "fallback"):
            self._save(d.t)

    def _save(self, now: float) -> None:
        try:
            write_json_atomic(self.state_dir / STATE_FILE, dump(self.ctl, now, self.to_wall, self.profile_mode))
        except OSError as exc:
            log.error("cannot write the tuner's state: %s", exc)

    def _sync_metrics(self, now: float) -> None:
        if self.metrics is not None:
            self.metrics.sync(self.ctl, now, self.fleet)
