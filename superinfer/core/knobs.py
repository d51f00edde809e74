"""The one table of the scheduler's live knobs: bounds, default, type, unit, help and symbol of each.

Every other list of knobs is derived from :data:`KNOBS`: the core's ``PARAM_BOUNDS``, ``PARAM_DEFAULTS``,
``INTEGER_PARAMS`` and :class:`~superinfer.core.types.Params`' field defaults (a test checks they agree),
the daemon's profile schema, ``PUT /v1/params`` and its OpenAPI body, the ``/metrics`` series, the params
file of the vLLM plugin, the options of ``bench sim`` / ``bench vllm`` / ``bench fidelity`` and the
dashboard's labels. A knob added here is all of those at once.

Every value of a knob, whatever its source (a profile, ``PUT /v1/params``, the params file, a CLI, code
building :class:`Params`), passes :func:`check_knob`. Pure Python; no import from the rest of the package.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    """One live knob. ``kind`` is ``int`` or ``float``; ``lo <= value <= hi``; ``unit`` is "" when it has none;
    ``symbol`` is how the design and the dashboard write it (its name where it has no symbol of its own)."""

    name: str
    lo: float
    hi: float
    default: float | int
    kind: type
    unit: str
    help: str
    symbol: str

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.lo, self.hi)

    @property
    def option(self) -> str:
        """Its command-line option: ``--slack-gate-s``."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> float | int:
        """``value`` if it is valid (an int for an int knob), else :class:`KnobError`."""
        return check_number(self.name, value, self.lo, self.hi, integer=self.kind is int)


class KnobError(ValueError):
    """A value a knob (or a number checked alike) does not take; ``key`` and ``bound`` say which and why."""

    def __init__(self, key: str, message: str, bound: tuple[float, float]) -> None:
        super().__init__(message)
        self.key = key
        self.bound = bound


def check_number(name: str, value: Any, lo: float, hi: float, *, integer: bool = False) -> float | int:
    """The one validator of a bounded number: a finite int or float (not a bool) within ``[lo, hi]``, an
    integral value where ``integer`` (returned as an int). Raises :class:`KnobError` naming ``name``."""
    bound = (lo, hi)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise KnobError(name, f"{name} must be a number within [{lo}, {hi}], got {value!r}", bound)
    if integer:
        if not math.isfinite(value) or value != int(value):
            raise KnobError(name, f"{name} must be an integer within [{lo}, {hi}], got {value!r}", bound)
        value = int(value)
    elif not math.isfinite(value):
        raise KnobError(name, f"{name} must be a finite number within [{lo}, {hi}], got {value!r}", bound)
    if not lo <= value <= hi:
        raise KnobError(name, f"{name} must be within [{lo}, {hi}] (bound: {lo} <= {name} <= {hi}), "
                        f"got {value!r}", bound)
    return value


# RotaSched v2 knobs (`lvf`; `lvf-paper` ignores them): docs/design.md "RotaSched v2"; their defaults are
# the best of each knob's sweep (bench/results/v2_sweep*.json, bench/v2_sweep.py; rotation_margin_s from the
# long-output re-sweep, bench/results/reasoning/v2_sweep_reasoning.json). The paper's main setting
# is α = 3, δ_B = 0, δ_F = 0.5.
KNOBS: tuple[Knob, ...] = (
    Knob("alpha", 0.0, 100.0, 3.0, float, "", "VLT weight of rotary requests", "α"),
    Knob("delta_b", -10.0, 10.0, 0.0, float, "s", "TBT slack δ_B (s)", "δ_B"),
    Knob("delta_f", -60.0, 60.0, 0.5, float, "s", "TTFT slack δ_F (s)", "δ_F"),
    Knob("min_residency", 0, 10_000, 4, int, "iterations",
         "iterations after a swap-in before a request may be a discretionary victim", "min_residency"),
    Knob("max_rotations", 0, 1_000_000, 64, int, "rotations",
         "discretionary rotations per request (against starvation)", "max_rotations"),
    # TBT slack S_B·(k−1) − (t − t_first) after k tokens, or TTFT slack S_F − (t − t_arr) before the first
    Knob("slack_gate_s", -3600.0, 3600.0, 3.0, float, "s",
         "lvf: a discretionary victim must be ahead of its SLO by this much (s); -3600: off", "slack_gate_s"),
    Knob("rotation_margin_s", 0.0, 60.0, 5.0, float, "s",
         "lvf: a candidate displaces a running request only if its VLT exceeds the victim's by more than "
         "this (s); 0: off", "rotation_margin_s"),
    # Andes: a hopeless request gains nothing from service now
    Knob("hopeless_last", 0, 1, 1, int, "",
         "lvf: 1: waiting requests already past their TTFT SLO rank last and never displace; 0: off",
         "hopeless_last"),
    Knob("step_slo_share", 0.0, 10.0, 0.8, float, "",
         "lvf: iterations with running decodes are sized to this share of the tightest TBT SLO (prefill "
         "chunks cut, decodes never; needs a step-time model); 0: off", "step_slo_share"),
    # EASY-style backfilling: the candidate skipped keeps its rank for the next iteration
    Knob("backfill", 0, 1, 1, int, "",
         "lvf: 1: when the next candidate cannot be made to fit, admit later ones that fit in the free "
         "blocks while it is still ahead of its SLO (never preempting for them); 0: off", "backfill"),
    # superinfer.core.gate
    Knob("replan_steps", 1, 64, 4, int, "steps",
         "lvf: after a plan that decided nothing, serve the running batch without planning for up to this "
         "many steps in all while no request arrives, leaves, parks or joins; 1: plan every step",
         "replan_steps"),
    # superinfer.core.vlt: the return side on the slack gate's clock (issue 27; off until the real engine
    # has measured it: bench/results/reasoning/README.md)
    Knob("tbt_credit", 0, 1, 0, int, "",
         "lvf: 1: a parked request's lag counts from its mean-TBT deadline (the TBT slack it banked by its "
         "last token, credited up to its TTFT SLO); 0: from its last token (the paper's VLT)", "tbt_credit"),
)

#: the knobs by name, in table order
KNOB: dict[str, Knob] = {k.name: k for k in KNOBS}


def check_knob(name: str, value: Any) -> float | int:
    """Validate one knob's value (:meth:`Knob.check`); an unknown name is a :class:`KnobError` too."""
    knob = KNOB.get(name)
    if knob is None:
        raise KnobError(name, f"unknown parameter {name!r}; known: {', '.join(KNOB)}", (math.nan, math.nan))
    return knob.check(value)


for _k in KNOBS:  # the table obeys itself (its completeness: tests/core/test_knobs.py)
    _k.check(_k.default)
