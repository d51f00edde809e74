"""The twin's host terms: time an engine spends outside its calibrated step (docs/fidelity.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HostCosts:
    """Host-side time an engine spends outside the calibrated step (each a measured term of the twin;
    ``superinferd bench fidelity`` measures them on a real engine, docs/fidelity.md):

    * ``step_s``: added to every iteration (e.g. the vLLM plugin's table refresh and KV connector hooks,
      beyond the stock scheduler that a calibration already includes);
    * ``plan_s`` + ``plan_per_live_s`` x live requests: added to an iteration that plans (the plugin skips
      the plan where :func:`superinfer.core.nothing_to_plan` holds or the policy's ``only_serves_batch``
      does, and so does this term);
    * ``arrival_s``: per arriving request, serial with the engine loop (input processing between steps);
    * ``new_shape_s``: added to an iteration whose batch size in tokens the engine has not run before (on
      CPU, kernels are set up per shape: a prompt length never seen costs more than the warm fit says);
    * ``output_s`` + ``output_per_seq_s`` x scheduled sequences: added to every iteration (the engine's
      output processing after the scheduler's step: detokenising, request outputs, the serving loop);
    * ``waiting_s``: added to an iteration after whose admissions requests still wait (stock vLLM tries the
      head of its waiting queue every step and fails; the plugin checks whether the step only serves its
      batch);
    * ``wake_idle_s`` / ``wake_extra_s``: the first iteration after the engine sat idle (nothing live) costs
      more, the longer the idle time (on CPU: caches and the core go cold); measured points, interpolated
      in log idle time, flat beyond the last point, nothing below the first.
    """

    step_s: float = 0.0
    plan_s: float = 0.0
    arrival_s: float = 0.0
    new_shape_s: float = 0.0
    plan_per_live_s: float = 0.0
    output_s: float = 0.0
    output_per_seq_s: float = 0.0
    waiting_s: float = 0.0
    wake_idle_s: tuple[float, ...] = ()
    wake_extra_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        try:
            idle, extra = tuple(self.wake_idle_s), tuple(self.wake_extra_s)
        except TypeError:
            raise ValueError("host costs: wake_idle_s and wake_extra_s must be sequences of seconds, got "
                             f"{self.wake_idle_s!r}, {self.wake_extra_s!r}") from None
        if len(idle) != len(extra) or any(not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)
                                          for v in idle + extra) or any(b <= a for a, b in zip(idle, idle[1:])) \
                or (idle and idle[0] <= 0):
            raise ValueError("host costs: wake_idle_s and wake_extra_s must be as many finite times >= 0, "
                             f"wake_idle_s > 0 and increasing; got {idle!r}, {extra!r}")
        object.__setattr__(self, "wake_idle_s", idle)  # frozen: normalise lists to tuples
        object.__setattr__(self, "wake_extra_s", extra)
        for name in self.__dataclass_fields__:
            if name.startswith("wake_"):
                continue
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"host costs: {name} must be a finite number >= 0 (seconds), got {v!r}")

    def wake_s(self, idle_s: float) -> float:
        """The extra time of the first iteration after ``idle_s`` seconds with nothing live."""
        if not self.wake_idle_s or idle_s < self.wake_idle_s[0]:
            return 0.0
        return float(np.interp(math.log(idle_s), np.log(self.wake_idle_s), self.wake_extra_s))
