"""The tuner's search space: which knobs it moves, their bounds, and how far one decision may move them.

Bounds and integer knobs are the core's table of live values, ``LIVE_BOUNDS`` and ``LIVE_INTEGER`` (the
same table ``PUT /v1/params`` checks). One knob is the engine's, not the scheduler's: ``b_xfer``, the KV blocks
moved per iteration each way between HBM and host memory. Its upper bound is what the host's link was
measured to carry (the probe's budget, or the twin's for its hardware): the tuner may lower it (fewer
rotations per iteration), never raise it past the measurement; where no budget is known (a host with no
host tier) it is not tuned. Invariants of every method that returns a setting: each tuned knob is
within its bounds and an integer where the core says so; :meth:`KnobSpace.local` never moves a knob by
more than its step cap from where it starts, and :meth:`KnobSpace.toward` by more than ``factor`` times
it (``factor`` 1 for anything but an offline study's arm: see ``TunerConfig.arm_step_factor``); knobs
that are not tuned are passed through unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from superinfer.core import B_XFER_BOUNDS, LIVE_BOUNDS, LIVE_INTEGER, PARAM_DEFAULTS

Setting = dict[str, float]

#: every knob the tuner can move: the core's live table (the scheduler's knobs and ``b_xfer``)
TUNABLE_BOUNDS: dict[str, tuple[float, float]] = LIVE_BOUNDS
TUNABLE_INTEGER: tuple[str, ...] = LIVE_INTEGER

#: the knobs tuned unless the profile says otherwise (``max_rotations`` is a starvation guard, not a
#: performance knob, so it is left to the operator; ``replan_steps`` trades scheduler CPU for plan
#: freshness). ``backfill``, ``tbt_credit`` and ``b_xfer`` decide whether rotation pays on long outputs
#: (issue 30 item 3: on ``regimes`` each trades one phase against another, docs/tuner.md)
DEFAULT_KNOBS: tuple[str, ...] = ("alpha", "delta_b", "delta_f", "min_residency", "slack_gate_s",
                                  "rotation_margin_s", "hopeless_last", "step_slo_share", "backfill", "tbt_credit",
                                  "b_xfer")
#: ``b_xfer``'s step cap when none is set: this share of its upper bound
B_XFER_STEP_SHARE = 0.25
#: the most one decision may move each knob (its units: seconds for the deltas and gates, iterations for
#: ``min_residency``, a share of the tightest TBT SLO for ``step_slo_share``; ``b_xfer``'s is
#: :data:`B_XFER_STEP_SHARE` of its bound unless set)
DEFAULT_STEP_CAPS: dict[str, float] = {
    "alpha": 2.0, "delta_b": 0.05, "delta_f": 2.0, "min_residency": 4, "max_rotations": 16,
    "slack_gate_s": 2.0, "rotation_margin_s": 1.0, "hopeless_last": 1, "step_slo_share": 1.2, "backfill": 1,
    "replan_steps": 4, "tbt_credit": 1,
}


class SpaceError(ValueError):
    """An invalid knob list, step cap or setting; the message names the knob."""


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpaceError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


class KnobSpace:
    """The tuned knobs (a subset of :data:`TUNABLE_BOUNDS`) with their per-decision step caps.

    ``b_xfer_max``: the host's measured transfer budget, ``b_xfer``'s upper bound; None or 0 (no host
    tier) leaves ``b_xfer`` out of the tuned knobs (``dropped`` says so)."""

    def __init__(self, knobs: Iterable[str] = DEFAULT_KNOBS, step_caps: Mapping[str, float] | None = None,
                 b_xfer_max: int | None = None) -> None:
        wanted = tuple(dict.fromkeys(knobs))
        unknown = [k for k in wanted if k not in TUNABLE_BOUNDS]
        if unknown:
            raise SpaceError(f"knobs: unknown knob(s) {unknown}; known: {', '.join(TUNABLE_BOUNDS)}")
        if b_xfer_max is not None and (isinstance(b_xfer_max, bool) or int(b_xfer_max) != b_xfer_max
                                       or not 0 <= b_xfer_max <= B_XFER_BOUNDS[1]):
            raise SpaceError(f"b_xfer_max: expected an integer within [0, {B_XFER_BOUNDS[1]}], got {b_xfer_max!r}")
        self.dropped: tuple[str, ...] = ("b_xfer",) if "b_xfer" in wanted and not b_xfer_max else ()
        self.knobs: tuple[str, ...] = tuple(k for k in wanted if k not in self.dropped)
        if not self.knobs:
            raise SpaceError("knobs: expected at least one knob to tune")
        caps = dict(DEFAULT_STEP_CAPS)
        if b_xfer_max:
            caps["b_xfer"] = float(max(1, math.floor(B_XFER_STEP_SHARE * b_xfer_max)))
        missing = [k for k in self.knobs if k not in caps and k not in (step_caps or {})]
        if missing:
            raise SpaceError(f"step_caps: no default cap for {missing}; set [tuner] step_caps for them")
        for k, v in (step_caps or {}).items():
            if k not in TUNABLE_BOUNDS:
                raise SpaceError(f"step_caps: unknown knob {k!r}; known: {', '.join(TUNABLE_BOUNDS)}")
            if _finite(f"step_caps.{k}", v) <= 0:
                raise SpaceError(f"step_caps.{k}: expected a number > 0, got {v!r}")
            caps[k] = float(v)
        self.caps = {k: caps[k] for k in self.knobs}
        self.bounds = {k: (0.0, float(b_xfer_max)) if k == "b_xfer" else TUNABLE_BOUNDS[k] for k in self.knobs}
        self.defaults = {k: float(b_xfer_max) if k == "b_xfer" else float(PARAM_DEFAULTS[k]) for k in self.knobs}
        for k in self.knobs:
            if k in TUNABLE_INTEGER and self.caps[k] < 1:
                raise SpaceError(f"step_caps.{k}: an integer knob needs a cap >= 1, got {self.caps[k]!r}")

    # ---- settings -----------------------------------------------------------------------------
    def check(self, setting: Mapping[str, float]) -> Setting:
        """A copy of ``setting`` with every tuned knob present, within bounds and integral where needed;
        raises :class:`SpaceError` otherwise (nothing is clipped here: callers of this trust nothing)."""
        out = {k: float(v) for k, v in setting.items()}
        for k in self.knobs:
            if k not in out:
                raise SpaceError(f"setting: knob {k!r} is missing")
            v = _finite(k, out[k])
            lo, hi = self.bounds[k]
            if not lo <= v <= hi:
                raise SpaceError(f"setting: {k} = {v!r} is outside [{lo}, {hi}]")
            if k in TUNABLE_INTEGER and v != int(v):
                raise SpaceError(f"setting: {k} must be an integer, got {v!r}")
        return out

    def clip(self, setting: Mapping[str, float]) -> Setting:
        """``setting`` with each tuned knob clipped into its bounds and rounded if it is an integer knob."""
        out = {k: float(v) for k, v in setting.items()}
        for k in self.knobs:
            v = _finite(k, out.get(k, self.defaults[k]))
            lo, hi = self.bounds[k]
            v = min(max(v, lo), hi)
            out[k] = float(round(v)) if k in TUNABLE_INTEGER else v
        return out

    def toward(self, start: Mapping[str, float], target: Mapping[str, float], factor: float = 1.0) -> Setting:
        """Move from ``start`` toward ``target``, each tuned knob by at most ``factor`` times its step cap
        (knobs that ``target`` does not name stay). Integer knobs move by whole steps no larger than the
        cap."""
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1 or not math.isfinite(factor):
            raise SpaceError(f"factor: expected a finite number >= 1, got {factor!r}")
        out = self.clip(start)
        for k in self.knobs:
            if k not in target:
                continue
            cap = self.caps[k] * factor
            if k in TUNABLE_INTEGER:
                cap = math.floor(cap)
            want = _finite(k, target[k])
            delta = want - out[k]
            # within the cap: the target itself (start + (target - start) can miss it in the last bit, and an
            # operator would read step_slo_share 0.050000000000000044 in /v1/params)
            out[k] = want if abs(delta) <= cap else out[k] + math.copysign(cap, delta)
        return self._clip_within_cap(start, out, factor)

    def local(self, start: Mapping[str, float], u: Mapping[str, float], radius: float) -> Setting:
        """A local step: knob ``k`` moves by ``u[k] * radius * cap[k]`` (``u`` in [-1, 1], ``radius`` in
        (0, 1]: the trust region as a share of the step caps). An integer knob moves by whole units,
        ``trunc(u[k] * (radius * cap[k] + 1))``: the region reaches one unit past ``radius * cap``, so a 0/1
        switch (cap 1) flips when ``u`` points to its other value with ``|u| >= 1 / (radius + 1)`` (one
        uniform draw in six at the starting radius 0.5, one in 22 at the smallest, 0.1). Rounding
        ``u * radius * cap`` instead never flipped one at a radius of 0.5 or less: ``hopeless_last``,
        ``backfill`` and ``tbt_credit`` stayed where they started (e.g. ``tbt_credit`` 1 on the ``reasoning``
        profile, 22 pp below 0, in all 12 of its local steps)."""
        if not 0 < radius <= 1:
            raise SpaceError(f"radius: expected 0 < radius <= 1, got {radius!r}")
        base = self.clip(start)
        out = dict(base)
        for k in self.knobs:
            uk = max(-1.0, min(1.0, _finite(k, u.get(k, 0.0))))
            if k in TUNABLE_INTEGER:
                out[k] = base[k] + math.trunc(uk * (radius * self.caps[k] + 1.0))
            else:
                out[k] = base[k] + uk * radius * self.caps[k]
        return self._clip_within_cap(start, out)

    def _clip_within_cap(self, start: Mapping[str, float], out: Setting, factor: float = 1.0) -> Setting:
        """Clip into bounds; rounding an integer knob never takes it past its cap from ``start``."""
        res = self.clip(out)
        for k in self.knobs:
            if k in TUNABLE_INTEGER:
                s = min(max(float(start.get(k, res[k])), self.bounds[k][0]), self.bounds[k][1])
                cap = math.floor(self.caps[k] * factor)
                res[k] = float(min(max(res[k], math.ceil(s - cap)), math.floor(s + cap)))
                res[k] = float(min(max(res[k], self.bounds[k][0]), self.bounds[k][1]))
        return res

    def distance(self, a: Mapping[str, float], b: Mapping[str, float]) -> float:
        """The largest move of any tuned knob from ``a`` to ``b``, in units of its step cap."""
        return max((abs(float(a[k]) - float(b[k])) / self.caps[k] for k in self.knobs), default=0.0)

    def same(self, a: Mapping[str, float], b: Mapping[str, float], tol: float = 1e-9) -> bool:
        return self.distance(a, b) <= tol

    def values(self, setting: Mapping[str, float]) -> dict[str, float | int]:
        """The tuned knobs of ``setting`` as the params API takes them (ints for integer knobs)."""
        return {k: int(setting[k]) if k in TUNABLE_INTEGER else float(setting[k]) for k in self.knobs}
