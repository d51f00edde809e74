"""Live scheduler parameters: validation for ``PUT /v1/params`` and the params file the plugin reads.

Invariants: :attr:`ParamStore.values` always passed :func:`validate_update` (bounds from
``superinfer.core.PARAM_BOUNDS``; ``b_xfer`` within :data:`B_XFER_BOUNDS`); ``version`` increases by one
per accepted change; every accepted change is written to the params file atomically (temporary file +
``os.replace``) in the format of ``superinfer/vllm/params.py`` before listeners are told; then observers
are told the values, the change's source and its version (the tuner tells an operator's write from its
own this way). An empty update changes nothing (no new version) and is not an error: ``PUT /v1/params
{}`` is a valid no-op.

The live-tunable knobs are exactly the keys of ``PARAM_BOUNDS`` (:data:`PARAM_KEYS`); their defaults and
which of them are integers come from the fields of :class:`~superinfer.core.Params`. Every other daemon
module (profile schema, config, persistence, metrics, the API's body model) takes its key list from here,
so a knob added to the core is reachable everywhere with no edit in the daemon.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any, Callable

from superinfer.core import B_XFER_BOUNDS, INTEGER_PARAMS, PARAM_BOUNDS, Params, Tenant
from superinfer.core import PARAM_DEFAULTS as CORE_PARAM_DEFAULTS
from superinfer.daemon.lifecycle import write_json_atomic

#: the live-tunable scheduler knobs, in ``PARAM_BOUNDS`` order
PARAM_KEYS: tuple[str, ...] = tuple(PARAM_BOUNDS)
#: each knob's default, and the knobs that take integers (the core's)
PARAM_DEFAULTS = CORE_PARAM_DEFAULTS
INTEGER_PARAM_KEYS: tuple[str, ...] = INTEGER_PARAMS
BOUNDS: dict[str, tuple[float, float]] = {**PARAM_BOUNDS, "b_xfer": B_XFER_BOUNDS}
INTEGER_KEYS: tuple[str, ...] = INTEGER_PARAM_KEYS + ("b_xfer",)


class ParamError(ValueError):
    """A rejected parameter update; ``key`` and ``bound`` say which and why (HTTP 422)."""

    def __init__(self, key: str, message: str, bound: tuple[float, float] | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.bound = bound


def validate_update(update: Any) -> dict[str, float | int]:
    """Check a ``PUT /v1/params`` body: an object with a subset of :data:`BOUNDS`' keys."""
    if not isinstance(update, dict):
        raise ParamError("", f"expected a JSON object of parameters, got {type(update).__name__}")
    if not update:
        raise ParamError("", f"expected at least one of {', '.join(BOUNDS)}")
    out: dict[str, float | int] = {}
    for key, value in update.items():
        if key not in BOUNDS:
            raise ParamError(key, f"unknown parameter {key!r}; known: {', '.join(BOUNDS)}")
        lo, hi = BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParamError(key, f"{key} must be a finite number within [{lo}, {hi}], got {value!r}", (lo, hi))
        if key in INTEGER_KEYS:
            if value != int(value):
                raise ParamError(key, f"{key} must be an integer within [{lo}, {hi}], got {value!r}", (lo, hi))
            value = int(value)
        if not lo <= value <= hi:
            raise ParamError(key, f"{key} must be within [{lo}, {hi}] (bound: {lo} <= {key} <= {hi}), "
                             f"got {value!r}", (lo, hi))
        out[key] = value
    return out


class ParamStore:
    """The daemon's single source of live params. ``listeners`` are called with the new values."""

    def __init__(self, params: Params, b_xfer: int, tenants: list[Tenant], path: Path, source: str) -> None:
        self._lock = threading.Lock()
        self._base = params  # fields that are not live knobs (e.g. sarathi_token_budget) are kept from here
        self.values: dict[str, float | int] = validate_update(
            {**{k: getattr(params, k) for k in PARAM_KEYS}, "b_xfer": int(b_xfer)})
        self.tenants = tenants
        self.path = path
        self.version = 1
        self.source = source
        self.updated_at = time.time()
        self.listeners: list[Callable[[dict[str, float | int]], None]] = []
        self.observers: list[Callable[[dict[str, float | int], str, int], None]] = []
        self._write()

    def params(self) -> Params:
        v = self.values
        return self._base.replace(**{k: int(v[k]) if k in INTEGER_PARAM_KEYS else float(v[k]) for k in PARAM_KEYS})

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {**self.values, "version": self.version, "source": self.source, "updated_at": self.updated_at,
                    "file": str(self.path)}

    def update(self, update: Any, source: str) -> dict[str, Any]:
        """Validate and apply; raises :class:`ParamError`. Returns :meth:`snapshot`."""
        if isinstance(update, dict) and not update:
            return self.snapshot()
        changes = validate_update(update)
        with self._lock:
            self.values = {**self.values, **changes}
            self.version += 1
            self.source = source
            self.updated_at = time.time()
            self._write()
            values = dict(self.values)
            version = self.version
        for fn in self.listeners:
            fn(values)
        for obs in self.observers:
            obs(values, source, version)
        return self.snapshot()

    def file_data(self) -> dict[str, Any]:
        """The params file, in the vLLM plugin's format (``superinfer/vllm/params.py``)."""
        default = self.tenants[0]
        return {
            **self.values,
            "ttft_slo": default.ttft_slo,
            "tbt_slo": default.tbt_slo,
            "tenants": {t.name: {"ttft_slo": t.ttft_slo, "tbt_slo": t.tbt_slo, "weight": t.weight,
                                 "priority": t.priority} for t in self.tenants},
        }

    def _write(self) -> None:
        write_json_atomic(self.path, self.file_data())
