"""Live scheduler parameters: validation for ``PUT /v1/params`` and the params file the plugin reads.

Invariants: :attr:`ParamStore.values` always passed :func:`validate_update` (bounds from
``superinfer.core.PARAM_BOUNDS``; ``b_xfer`` within :data:`B_XFER_BOUNDS`); ``version`` increases by one
per accepted change; every accepted change is written to the params file atomically (temporary file +
``os.replace``) in the format of ``superinfer/vllm/params.py`` before listeners are told.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any, Callable

from superinfer.core import PARAM_BOUNDS, Params, Tenant
from superinfer.daemon.lifecycle import write_json_atomic

B_XFER_BOUNDS: tuple[int, int] = (0, 1_000_000)
BOUNDS: dict[str, tuple[float, float]] = {**PARAM_BOUNDS, "b_xfer": B_XFER_BOUNDS}
INTEGER_KEYS = ("min_residency", "max_rotations", "b_xfer")


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
        self.values: dict[str, float | int] = {
            "alpha": params.alpha, "delta_b": params.delta_b, "delta_f": params.delta_f,
            "min_residency": params.min_residency, "max_rotations": params.max_rotations, "b_xfer": int(b_xfer),
        }
        validate_update(self.values)
        self.tenants = tenants
        self.path = path
        self.version = 1
        self.source = source
        self.updated_at = time.time()
        self.listeners: list[Callable[[dict[str, float | int]], None]] = []
        self._write()

    def params(self) -> Params:
        v = self.values
        return Params(alpha=float(v["alpha"]), delta_b=float(v["delta_b"]), delta_f=float(v["delta_f"]),
                      min_residency=int(v["min_residency"]), max_rotations=int(v["max_rotations"]))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {**self.values, "version": self.version, "source": self.source, "updated_at": self.updated_at,
                    "file": str(self.path)}

    def update(self, update: Any, source: str) -> dict[str, Any]:
        """Validate and apply; raises :class:`ParamError`. Returns :meth:`snapshot`."""
        changes = validate_update(update)
        with self._lock:
            self.values = {**self.values, **changes}
            self.version += 1
            self.source = source
            self.updated_at = time.time()
            self._write()
            values = dict(self.values)
        for fn in self.listeners:
            fn(values)
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
