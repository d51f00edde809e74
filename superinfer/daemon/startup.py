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
from superinfer.daemon.params import ParamStore

log = logging.getLogger("superinfer.daemon")
FALLBACK_B_XFER = 64  # the plugin's default when nothing better is known
PERSISTED_PARAM_KEYS = ("alpha", "delta_b", "delta_f", "min_residency", "max_rotations")


def probe_bandwidth(cfg: Config, block_bytes: int | None) -> dict[str, Any] | None:
    """The startup bandwidth probe (small, a second or two); logs the figures. None: skipped or failed."""
    if block_bytes is None:
        return None
    t0 = time.monotonic()
    try:
        from superinfer.duplexkv.probe import run_probe as probe

        size = max(cfg.get("scheduler", "probe_size_mb") << 20, block_bytes)
        res = probe(block_bytes, device=cfg.d("device"), iteration_s=cfg.get("scheduler", "iteration_s"),
                    bytes_each_way=size, repeats=cfg.get("scheduler", "probe_repeats"),
                    eta=cfg.get("scheduler", "eta")).as_dict()
    except Exception as exc:  # noqa: BLE001 - the daemon serves without a probe, and says so
        log.error("bandwidth probe failed (%s: %s); B_xfer falls back", type(exc).__name__, exc)
        return None
    res["elapsed_s"] = round(time.monotonic() - t0, 3)
    log.info("probe: %s (%s), block %d bytes: one way H2D %.2f GB/s, D2H %.2f GB/s; both at once H2D %.2f, "
             "D2H %.2f GB/s (duplex factor %.2f) -> B_xfer %d blocks per %g s iteration (%.2f s)",
             res["device"], res["device_name"], block_bytes, res["h2d_gbps"], res["d2h_gbps"],
             res["duplex_h2d_gbps"], res["duplex_d2h_gbps"], res["duplex_factor"], res["b_xfer_blocks"],
             res["iteration_s"], res["elapsed_s"])
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
        now_profile = {k: cfg.get("scheduler", k) for k in PERSISTED_PARAM_KEYS}
        if persisted.get("profile_params") == now_profile and isinstance(persisted.get("params"), dict):
            try:
                params = params.replace(**{k: persisted["params"][k] for k in PERSISTED_PARAM_KEYS})
                source = f"state:{state_dir / lc.STATE_FILE}"
                log.info("live params restored from %s (the profile's scheduler section is unchanged)",
                         state_dir / lc.STATE_FILE)
            except (KeyError, ValueError, TypeError) as exc:
                log.warning("ignoring persisted params in %s: %s", state_dir / lc.STATE_FILE, exc)
    store = ParamStore(params, b_xfer, cfg.tenants, state_dir / lc.PARAMS_FILE, source)
    log.info("params (%s): alpha=%g delta_b=%g delta_f=%g min_residency=%d max_rotations=%d; B_xfer=%d (%s)",
             source, params.alpha, params.delta_b, params.delta_f, params.min_residency, params.max_rotations,
             b_xfer, b_src)
    return store


def persist(path: Path, cfg: Config, backend: Backend, store: ParamStore, uptime_s: float,
            drain: dict[str, Any] | None) -> Path:
    """Write ``state.json`` at shutdown: params (restored next start), counters, the drain's summary."""
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
    }
    lc.write_json_atomic(path, data)
    return path
