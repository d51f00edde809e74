"""Live scheduler parameters for the vLLM plugin: a small JSON file the daemon and the tuner write.

The file (path from ``$SUPERINFER_PARAMS_FILE`` or ``kv_connector_extra_config["params_file"]``) holds
any subset of::

    {"alpha": 3.0, "delta_b": 0.0, "delta_f": 0.5, "min_residency": 4, "max_rotations": 64,
     "slack_gate_s": 1.0, "rotation_margin_s": 0.0, "hopeless_last": 1, ...,
     "b_xfer": 64, "ttft_slo": 5.0, "tbt_slo": 0.1,
     "tenants": {"voice": {"ttft_slo": 2.0, "tbt_slo": 0.05, "weight": 2.0}}}

The scheduler knobs are every key of ``superinfer.core.PARAM_BOUNDS`` (:data:`PARAM_KEYS`); those whose
:class:`Params` default is an int take integers. Missing keys keep their defaults (``Params``'s).
:meth:`ParamSource.current` costs one ``os.stat`` at most every ``check_every_s`` seconds and re-reads
the file only when its mtime (or size) changed. Invariants: the
values returned always passed validation (each knob by the core's ``check_knob``, ``b_xfer`` within
:data:`B_XFER_BOUNDS`, tenants via :class:`Tenant`); a bad or unreadable file is logged once per change and
ignored, so the last good values stay in force. This module owns the file's format both ways: the daemon
builds it with :func:`params_file_data` and every writer goes through :func:`write_params` (atomic
replace), which validates with :func:`parse_params` first. :func:`plugin_wiring` is the one place that
says how an engine loads the plugin (scheduler class, DuplexKV connector, environment): the daemon's
``vllm serve`` command line and the benches' in-process ``LLM(...)`` both take it from there.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from superinfer.core import (B_XFER_BOUNDS, HBM_ONLY_POLICIES, INTEGER_PARAMS, PARAM_BOUNDS, Params, Tenant, check_knob,
                             check_number, core_policy_name)
from superinfer.core.budget import IterationModel
from superinfer.jsonfile import write_json_atomic

log = logging.getLogger(__name__)

ENV_PARAMS_FILE = "SUPERINFER_PARAMS_FILE"
ENV_CALIBRATION = "SUPERINFER_CALIBRATION"
ENV_POLICY = "SUPERINFER_POLICY"
SCHEDULER_CLS = "superinfer.vllm.RotaScheduler"
DEFAULT_B_XFER = 64
#: the scheduler knobs the file may set: every live-tunable knob of the core
PARAM_KEYS: tuple[str, ...] = tuple(PARAM_BOUNDS)
#: knobs that take integers (the core's)
INTEGER_PARAM_KEYS: tuple[str, ...] = INTEGER_PARAMS
_KNOWN_KEYS = frozenset(PARAM_KEYS + ("b_xfer", "ttft_slo", "tbt_slo", "tenants"))


@dataclass(frozen=True)
class LiveParams:
    """One validated set of live values. ``version`` increases with every accepted change."""

    params: Params = field(default_factory=Params)
    b_xfer: int = DEFAULT_B_XFER
    default_tenant: Tenant = field(default_factory=Tenant)
    tenants: tuple[Tenant, ...] = ()
    version: int = 0


def parse_params(data: Any, base: LiveParams | None = None) -> LiveParams:
    """Validate a decoded JSON object and return the live values. Raises ValueError with the key."""
    base = base or LiveParams()
    if not isinstance(data, dict):
        raise ValueError(f"params file: expected a JSON object, got {type(data).__name__}")
    unknown = set(data) - _KNOWN_KEYS
    if unknown:
        raise ValueError(f"params file: unknown key(s) {sorted(unknown)}; known: {sorted(_KNOWN_KEYS)}")
    for key in ("ttft_slo", "tbt_slo"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], (int, float))):
            raise ValueError(f"params file: {key} must be a number, got {data[key]!r}")
    try:  # the core's one validator of a knob (superinfer.core.knobs), b_xfer checked alike
        changes = {k: check_knob(k, data[k]) for k in PARAM_KEYS if k in data}
        b_xfer = check_number("b_xfer", data.get("b_xfer", DEFAULT_B_XFER), *B_XFER_BOUNDS, integer=True)
        params = Params().replace(**changes)
    except ValueError as exc:
        raise ValueError(f"params file: {exc}") from None
    default = Tenant("default", float(data.get("ttft_slo", 5.0)), float(data.get("tbt_slo", 0.1)))
    tenants: list[Tenant] = []
    raw = data.get("tenants", {})
    if not isinstance(raw, dict):
        raise ValueError("params file: tenants must be an object of name -> {ttft_slo, tbt_slo, weight}")
    for name, spec in raw.items():
        if not isinstance(spec, dict) or set(spec) - {"ttft_slo", "tbt_slo", "weight", "priority"}:
            raise ValueError(f"params file: tenant {name!r} must be an object with ttft_slo/tbt_slo/weight/priority")
        tenants.append(Tenant(str(name), float(spec.get("ttft_slo", default.ttft_slo)),
                              float(spec.get("tbt_slo", default.tbt_slo)), float(spec.get("weight", 1.0)),
                              int(spec.get("priority", 0))))
    return LiveParams(params, b_xfer, default, tuple(tenants), base.version + 1)


class ParamSource:
    """Watches one params file; ``current()`` is cheap enough to call every scheduler step."""

    def __init__(self, path: str | os.PathLike[str] | None, *, check_every_s: float = 0.05,
                 initial: LiveParams | None = None) -> None:
        self.path = Path(path) if path else None
        self.check_every_s = float(check_every_s)
        self._live = initial or LiveParams()
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the last file looked at
        self._next_check = 0.0
        self.reloads = 0
        self.rejected = 0
        if self.path is not None:
            self.poll(force=True)

    @property
    def live(self) -> LiveParams:
        return self._live

    def current(self) -> LiveParams:
        """The live values, re-reading the file if it changed (checked at most every check_every_s)."""
        if self.path is not None:
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + self.check_every_s
                self.poll()
        return self._live

    def poll(self, force: bool = False) -> bool:
        """Re-read the file if its mtime/size changed (or ``force``); True if new values were taken."""
        if self.path is None:
            return False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._stamp != (-1, -1):
                log.warning("params file %s does not exist; keeping the current values", self.path)
                self._stamp = (-1, -1)
            return False
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp and not force:
            return False
        self._stamp = stamp
        try:
            data = json.loads(self.path.read_text())
            live = parse_params(data, self._live)
        except (OSError, ValueError) as exc:
            self.rejected += 1
            log.error("params file %s rejected, keeping the last good values: %s", self.path, exc)
            return False
        self._live = live
        self.reloads += 1
        log.info("params file %s loaded (version %d): %s, b_xfer=%d", self.path, live.version, live.params,
                 live.b_xfer)
        return True


def params_file_data(values: dict[str, Any], tenants: list[Tenant] | tuple[Tenant, ...]) -> dict[str, Any]:
    """The params file for live ``values`` (knobs and ``b_xfer``) and ``tenants``, the first the default one
    (its SLOs are the file's ``ttft_slo``/``tbt_slo``): what the daemon writes, :func:`parse_params` reads."""
    default = tenants[0]
    return {
        **values,
        "ttft_slo": default.ttft_slo,
        "tbt_slo": default.tbt_slo,
        "tenants": {t.name: {"ttft_slo": t.ttft_slo, "tbt_slo": t.tbt_slo, "weight": t.weight,
                             "priority": t.priority} for t in tenants},
    }


def write_params(path: str | os.PathLike[str], values: dict[str, Any], mode: int = 0o644) -> None:
    """Validate ``values`` (:func:`parse_params`) and replace the params file atomically and durably
    (temporary file, fsync, ``os.replace``): the one writer of the file (daemon, tuner, benches, tests)."""
    parse_params(values)
    write_json_atomic(path, values, mode=mode)


def load_step_model(path: str | None) -> IterationModel | None:
    """The step-time model of a calibration file (``superinferd calibrate``), or None without one."""
    if not path:
        return None
    from superinfer.sim.calibration import load

    try:
        return load(path).coefficients.iteration_s
    except (OSError, ValueError) as exc:
        raise ValueError(f"RotaScheduler: calibration {path!r} (from ${ENV_CALIBRATION} or the connector's "
                         f"'calibration'): {exc}") from exc


@dataclass(frozen=True)
class PluginWiring:
    """How one vLLM engine loads the plugin: RotaScheduler always; the DuplexKV connector only with a host
    tier (``kv_transfer_config`` None: none), its settings then in the connector's extra config, else in
    ``env`` (the scheduler reads both: :mod:`superinfer.vllm.scheduler`)."""

    scheduler_cls: str
    kv_transfer_config: dict[str, Any] | None
    env: dict[str, str]

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.LLM`` / ``EngineArgs``."""
        out: dict[str, Any] = {"scheduler_cls": self.scheduler_cls}
        if self.kv_transfer_config is not None:
            out["kv_transfer_config"] = self.kv_transfer_config
        return out

    def cli_args(self) -> list[str]:
        """The same as ``vllm serve`` flags."""
        out = ["--scheduler-cls", self.scheduler_cls]
        if self.kv_transfer_config is not None:
            out += ["--kv-transfer-config", json.dumps(self.kv_transfer_config)]
        return out


def plugin_wiring(policy: str, params_file: str | os.PathLike[str] | None = None, *, host_tier: bool = True,
                  host_blocks: int | None = None, load: str | None = None,
                  calibration: str | None = None) -> PluginWiring:
    """The plugin for the engine policy ``policy`` (``lvf``, ``lvf-hbm``, ``vllm``, ...; the scheduler runs its
    core policy, :func:`~superinfer.core.core_policy_name`). The connector comes only where the policy keeps
    a host tier and ``host_tier`` says there is one (a host pool of more than 0 bytes): ``lvf-hbm`` and an
    empty pool run RotaScheduler alone. ``host_blocks``, ``load``: the connector's pool size and load mode
    (None: its defaults); ``calibration``: a step-time calibration file (None: the online fit)."""
    core = core_policy_name(policy)
    if policy in HBM_ONLY_POLICIES or not host_tier:
        env = {ENV_POLICY: core}
        if params_file:
            env[ENV_PARAMS_FILE] = str(params_file)
        if calibration:
            env[ENV_CALIBRATION] = str(calibration)
        return PluginWiring(SCHEDULER_CLS, None, env)
    extra: dict[str, Any] = {"policy": core}
    if params_file:
        extra["params_file"] = str(params_file)
    for key, value in (("host_blocks", host_blocks), ("load", load), ("calibration", calibration)):
        if value:
            extra[key] = value
    ktc = {"kv_connector": "DuplexKVConnector", "kv_connector_module_path": "superinfer.vllm", "kv_role": "kv_both",
           "kv_connector_extra_config": extra}
    return PluginWiring(SCHEDULER_CLS, ktc, {})
