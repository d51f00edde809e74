"""Live scheduler parameters: validation for ``PUT /v1/params`` and the params file the plugin reads.

Invariants: :attr:`ParamStore.values` always passed :func:`validate_update` (each knob by the core's
``check_knob``, the one validator of ``superinfer.core.knobs``; ``b_xfer`` within :data:`B_XFER_BOUNDS`);
``version`` increases by one per accepted change; every accepted change is written to the params file by
``superinfer.vllm.params.write_params`` (atomic, validated by the plugin's own parser; that module owns the
format both ways) before listeners are told; then observers
are told the values, the change's source and its version (the tuner tells an operator's write from its
own this way). An empty update changes nothing (no new version) and is not an error: ``PUT /v1/params
{}`` is a valid no-op.

The live-tunable knobs are exactly those of the core's knob table ``superinfer.core.KNOBS`` (:data:`PARAM_KEYS`,
in ``PARAM_BOUNDS`` order), with its defaults and integer knobs. Every other daemon
module (profile schema, config, persistence, metrics, the API's body model) takes its key list from here,
so a knob added to the core is reachable everywhere with no edit in the daemon.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from superinfer.core import (B_XFER_BOUNDS, INTEGER_PARAMS, LIVE_BOUNDS, LIVE_INTEGER, PARAM_BOUNDS, KnobError,
                             Params, Tenant, check_knob, check_number)
from superinfer.core import PARAM_DEFAULTS as CORE_PARAM_DEFAULTS
from superinfer.vllm.params import params_file_data, write_params

#: the live-tunable scheduler knobs, in ``PARAM_BOUNDS`` order
PARAM_KEYS: tuple[str, ...] = tuple(PARAM_BOUNDS)
#: each knob's default, and the knobs that take integers (the core's)
PARAM_DEFAULTS = CORE_PARAM_DEFAULTS
INTEGER_PARAM_KEYS: tuple[str, ...] = INTEGER_PARAMS
BOUNDS: dict[str, tuple[float, float]] = LIVE_BOUNDS  # the core's one table of live values
INTEGER_KEYS: tuple[str, ...] = LIVE_INTEGER


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
        try:  # the core's one validator (superinfer.core.knobs), b_xfer checked alike
            out[key] = check_knob(key, value) if key in PARAM_BOUNDS else \
                check_number(key, value, *B_XFER_BOUNDS, integer=True)
        except KnobError as exc:
            raise ParamError(key, str(exc), exc.bound) from None
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
        """The params file, in the vLLM plugin's format (``superinfer/vllm/params.py`` owns it both ways)."""
        return params_file_data(self.values, self.tenants)

    def _write(self) -> None:
        write_params(self.path, self.file_data())
