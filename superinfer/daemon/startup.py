"""Startup and shutdown steps of the daemon that need no running server: the bandwidth probe, the
initial live params (profile, or restored from ``state.json``), and persisting ``state.json``.

Each takes exactly what it reads (no ``Daemon``), so the server imports these and nothing here imports
the server.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from superinfer.daemon import lifecycle as lc
from superinfer.daemon.backends.base import Backend
from superinfer.daemon.config import Config
from superinfer.daemon.parallel import probe_each, rank_devices
from superinfer.daemon.params import PARAM_DEFAULTS, PARAM_KEYS, ParamStore, validate_update
from superinfer.jsonfile import write_json_atomic

log = logging.getLogger("superinfer.daemon")
FALLBACK_B_XFER = 64  # the plugin's default when nothing better is known
PERSISTED_PARAM_KEYS = PARAM_KEYS  # every live knob of the core (superinfer.core.PARAM_BOUNDS)


def probe_bandwidth(cfg: Config, block_bytes: int | None) -> dict[str, Any] | None:
    """The startup bandwidth probe (small, a second or two); logs the figures. None: skipped or failed."""
    if block_bytes is None:
        return None
    t0 = time.monotonic()
    try:
        from superinfer.duplexkv.probe import run_probe as probe

        size = max(cfg.get("scheduler", "probe_size_mb") << 20, block_bytes)

        def run() -> dict[str, Any]:
            return probe(block_bytes, device=cfg.d("device"), iteration_s=cfg.get("scheduler", "iteration_s"),
                         bytes_each_way=size, repeats=cfg.get("scheduler", "probe_repeats"),
                         eta=cfg.get("scheduler", "eta")).as_dict()

        # with tensor/pipeline parallelism every local rank's GPU is probed; the slowest sets B_xfer
        devices = rank_devices(cfg.d("device"), cfg.get("engine", "tensor_parallel_size")
                               * cfg.get("engine", "pipeline_parallel_size"))
        res = probe_each(devices, run) if len(devices) > 1 else run()
    except Exception as exc:  # noqa: BLE001 - the daemon serves without a probe, and says so
        log.error("bandwidth probe failed (%s: %s); B_xfer falls back", type(exc).__name__, exc)
        return None
    res["elapsed_s"] = round(time.monotonic() - t0, 3)
    log.info("probe: %s (%s), block %d bytes: one way H2D %.2f GB/s, D2H %.2f GB/s; both at once H2D %.2f, "
             "D2H %.2f GB/s (duplex factor %.2f) -> B_xfer %d blocks per %g s iteration (%.2f s)",
             res["device"], res["device_name"], block_bytes, res["h2d_gbps"], res["d2h_gbps"],
             res["duplex_h2d_gbps"], res["duplex_d2h_gbps"], res["duplex_factor"], res["b_xfer_blocks"],
             res["iteration_s"], res["elapsed_s"])
    if res.get("ranks"):
        log.info("probe: %d rank GPUs measured, B_xfer from the slowest: %s", len(res["ranks"]),
                 ", ".join(f"cuda:{r['cuda_device']} {r['b_xfer_blocks']}" for r in res["ranks"]))
    if res.get("note"):
        log.warning("probe: %s", res["note"])
    return res


def initial_params(cfg: Config, b: Backend, probe: dict[str, Any] | None, state_dir: Path) -> ParamStore:
    """The live params at startup: the profile's, or those persisted by the last run of the same profile
    while its scheduler section is unchanged; ``B_xfer`` fixed, from the backend, the probe, or a fallback."""
    fixed = cfg.get("scheduler", "b_xfer")
    if fixed != "auto":
        b_xfer, b_src = int(fixed), cfg.values["scheduler"]["b_xfer"].source
    elif b.default_b_xfer() is not None:
        b_xfer, b_src = int(b.default_b_xfer()), f"{b.name} backend"
        if b.simulation:
            log.info("B_xfer %d from the twin's hardware profile %s (the probe measures this host, not the twin)",
                     b_xfer, cfg.get("engine", "hardware"))
    elif probe is not None:
        b_xfer, b_src = int(probe["b_xfer_blocks"]), "probe"
    else:
        b_xfer, b_src = FALLBACK_B_XFER, "fallback (probe failed or skipped)"
    params = cfg.params()
    source = "profile"
    persisted = lc.read_json(state_dir / lc.STATE_FILE)
    if persisted and persisted.get("profile") == cfg.profile:
        restored = _restorable(persisted, {k: cfg.get("scheduler", k) for k in PERSISTED_PARAM_KEYS})
        if restored is not None:
            try:
                params = params.replace(**validate_update(restored)) if restored else params
                source = f"state:{state_dir / lc.STATE_FILE}"
                log.info("live params restored from %s (the profile's scheduler section is unchanged)",
                         state_dir / lc.STATE_FILE)
            except (KeyError, ValueError, TypeError) as exc:
                log.warning("ignoring persisted params in %s: %s", state_dir / lc.STATE_FILE, exc)
    store = ParamStore(params, b_xfer, cfg.tenants, state_dir / lc.PARAMS_FILE, source)
    log.info("params (%s): %s; B_xfer=%d (%s)", source,
             " ".join(f"{k}={getattr(params, k):g}" for k in PERSISTED_PARAM_KEYS), b_xfer, b_src)
    return store


def _restorable(persisted: dict[str, Any], now_profile: dict[str, Any]) -> dict[str, Any] | None:
    """The persisted live values to restore, or None when the profile's knobs changed since they were
    saved. A knob the saved state does not name (saved before the knob existed) counts as unchanged if
    the profile leaves it at its default, and keeps the profile's value; knobs the core no longer has
    are ignored."""
    saved_profile, saved = persisted.get("profile_params"), persisted.get("params")
    if not isinstance(saved_profile, dict) or not isinstance(saved, dict):
        return None
    if any(saved_profile.get(k, PARAM_DEFAULTS[k]) != v for k, v in now_profile.items()):
        return None
    return {k: saved[k] for k in now_profile if k in saved}


def persist(path: Path, cfg: Config, backend: Backend, store: ParamStore, uptime_s: float,
            drain: dict[str, Any] | None, error: str | None = None) -> Path:
    """Write ``state.json`` at shutdown: params (restored next start), counters, the drain's summary, and
    why the engine failed (None: it did not; ``superinferd status`` shows it while nothing runs)."""
    data = {
        "profile": cfg.profile,
        "backend": backend.name,
        "simulation": backend.simulation,
        "stopped_at": time.time(),
        "uptime_s": round(uptime_s, 3),
        "params": {k: store.values[k] for k in PERSISTED_PARAM_KEYS},
        "b_xfer": store.values["b_xfer"],
        "params_version": store.version,
        "profile_params": {k: cfg.get("scheduler", k) for k in PERSISTED_PARAM_KEYS},
        "counters": backend.counters(),
        "drain": drain,
        "error": error,
    }
    write_json_atomic(path, data)
    return path
