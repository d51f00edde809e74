"""The tuner's settings (the ``[tuner]`` profile section maps onto these), validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from superinfer.tuner.space import DEFAULT_KNOBS

MODES: tuple[str, ...] = ("off", "shadow", "advise", "auto")
ARM_TESTS: tuple[str, ...] = ("unless_worse", "noninferiority")


class TunerConfigError(ValueError):
    """An invalid tuner setting; the message names it."""


@dataclass(frozen=True)
class TunerConfig:
    """Settings of one :class:`~superinfer.tuner.controller.Controller` (times in the controller's clock,
    seconds).

    * ``window_s``: length of a measurement window (arrival times); ``warmup_s``: how long after a change
      arrivals are not counted; ``min_requests``: decided requests a window needs (fewer: the window is
      extended once, then the trial is inconclusive; a load that cannot reach it in a window freezes the
      tuner, ``low_load``); ``max_window_s``: on sparse traffic a window grows to hold ``min_requests``
      (``superinfer.tuner.sparse``: ``1.25 min_requests / rate``, between ``window_s`` and this; the
      freeze then needs ``rate x max_window_s < min_requests``; ``window_s``: a fixed window);
      ``settle_s``: how long after the largest TTFT SLO past a window's end the
      evaluation waits for running requests (``max_settle_s`` at most).
    * ``alpha``: the accept test's level; ``guard_alpha``, ``guard_margin`` (attainment, 0.05 = 5 pp),
      ``guard_min_requests`` (per tenant): the rollback guard. ``arm_test``: the verdict on an offline
      study's arm (a local step always needs superiority at ``alpha``): ``unless_worse`` (default; the
      study is the evidence for it, so the burden of proof is on the trial: adopted unless the trial
      shows it significantly worse than the incumbent, one-sided at ``alpha``, or its point estimate more
      than ``guard_margin`` below the incumbent's) or ``noninferiority``
      (the trial must show it is not worse by more than ``noninferiority_margin``, one-sided at ``alpha``;
      with 4 slots a side near capacity that almost never passes, docs/tuner.md).
    * ``cooldown_s``: after a decision, no new trial before this; ``max_rollbacks_per_hour``: freeze
      (``rollbacks``) while this many rollbacks happened in the last hour.
    * ``switch_slots``, ``switch_warmup_s``: a trial is a switchback (``superinfer.tuner.switchback``):
      ``switch_slots`` slots (even) alternate candidate and incumbent in the Thue-Morse order, each
      ``window_s / (switch_slots / 2) + switch_warmup_s`` long, arrivals in the first ``switch_warmup_s``
      of a slot not counted: each side gets ``window_s`` of counted arrivals. ``test_unit``: ``slot``
      (the tests treat slots as the units, cluster-robust, Student's t: ``superinfer.tuner.stats``) or
      ``request`` (two-proportion z-tests on the requests, as if independent; optimistic).
    * ``knobs``, ``step_caps``: the tuned knobs and the most one decision moves each; ``b_xfer_max``:
      the host's measured transfer budget, ``b_xfer``'s upper bound (None or 0: ``b_xfer`` is not tuned,
      ``superinfer.tuner.space``); ``trust_region``:
      the initial radius of local steps as a share of the caps; ``arm_step_factor``: an offline study's
      arm (a setting the study evaluated on the twin) may move each knob by up to this many step caps
      in one decision (local steps: one cap).
    * ``slot_s``: feature slot length; ``ph_delta``, ``ph_lambda``: Page-Hinkley (feature units);
      ``phase_max_distance``: farther than this from every phase of the arms file is "unknown";
      ``classify_slots``: slots after a change before the phase is named (and jumped to).
    * ``gamma``, ``explore_threshold``: the bandit (``superinfer.tuner.bandit``); ``seed``.
    * ``jump_gain``: after a phase is named, its offline arm is adopted at once, without a trial (a
      *jump*), when the arms file says what the study measured in that phase for the incumbent's setting
      (the start or another phase's arm) and the arm beat it there by at least this much (attainment);
      then the arm's first window is checked against the study's score for the setting it replaced, and
      a live score below that brings a switchback trial of that setting (``revert:<phase>``). Otherwise
      (no such score, a smaller gain, or 1: never) the arm is tried as before. Default 0.1, twice
      the guard's margin.
    * ``change_fallback``: when the traffic changes (a Page-Hinkley alarm), go at once to the arms file's
      ``robust`` setting (its best over the whole study trace; within ``arm_step_factor`` caps), unless
      that is the incumbent: a setting chosen for one phase is not known to be good in the next (on
      ``regimes`` the reasoning arm carried into the voice rush lost 13-25 pp there, docs/tuner.md).
    * ``futility_margin``: a local step whose candidate is more than this below the incumbent once the
      first C I I C block is in (both sides ``guard_min_requests`` decided) is rejected at once, half-way
      (``superinfer.tuner.trials``): the look can only turn an accept into a reject, never add one, and it
      stops the damage of a step that collapses a queue. 1: no interim look.
    * ``explore_budget``: local steps may lose at most this share of the attainment over the last hour
      (``superinfer.tuner.budget``; realised losses, attainment-seconds); spent, none is offered. 0: no
      local steps (only the offline study's arms).
    """

    mode: str = "off"
    window_s: float = 120.0
    warmup_s: float = 20.0
    min_requests: int = 200
    max_window_s: float = 900.0
    settle_s: float = 10.0
    max_settle_s: float = 120.0
    alpha: float = 0.05
    guard_alpha: float = 0.01
    guard_margin: float = 0.05
    guard_min_requests: int = 30
    arm_test: str = "unless_worse"
    noninferiority_margin: float = 0.02
    cooldown_s: float = 60.0
    max_rollbacks_per_hour: int = 3
    switch_slots: int = 8
    switch_warmup_s: float = 10.0
    test_unit: str = "slot"
    knobs: tuple[str, ...] = DEFAULT_KNOBS
    step_caps: dict[str, float] = field(default_factory=dict)
    b_xfer_max: int | None = None
    trust_region: float = 0.5
    arm_step_factor: float = 3.0
    slot_s: float = 30.0
    ph_delta: float = 0.5
    ph_lambda: float = 3.0
    phase_max_distance: float = 1.5
    classify_slots: int = 2
    gamma: float = 0.9
    explore_threshold: float = 0.25
    explore_budget: float = 0.01
    jump_gain: float = 0.1
    futility_margin: float = 0.1
    change_fallback: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TunerConfigError(f"mode: expected one of {', '.join(MODES)}, got {self.mode!r}")
        positive = ("window_s", "max_window_s", "slot_s", "max_settle_s", "ph_lambda")
        non_negative = ("warmup_s", "switch_warmup_s", "settle_s", "cooldown_s", "ph_delta", "phase_max_distance")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in positive + non_negative:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise TunerConfigError(f"{f.name}: expected a finite number, got {v!r}")
                if (f.name in positive and v <= 0) or v < 0:
                    raise TunerConfigError(f"{f.name}: expected a number {'>' if f.name in positive else '>='} 0, got {v!r}")
        for name in ("alpha", "guard_alpha"):
            if not 0 < getattr(self, name) < 0.5:
                raise TunerConfigError(f"{name}: expected 0 < {name} < 0.5, got {getattr(self, name)!r}")
        for name in ("guard_margin", "noninferiority_margin"):
            if not 0 <= getattr(self, name) < 1:
                raise TunerConfigError(f"{name}: expected 0 <= {name} < 1, got {getattr(self, name)!r}")
        fm = self.futility_margin
        if isinstance(fm, bool) or not isinstance(fm, (int, float)) or not 0 < fm <= 1:
            raise TunerConfigError(f"futility_margin: expected a share in (0, 1] (1: no interim look), got {fm!r}")
        for name in ("min_requests", "guard_min_requests", "max_rollbacks_per_hour", "classify_slots", "switch_slots"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TunerConfigError(f"{name}: expected an integer >= 1, got {v!r}")
        if not 0 < self.trust_region <= 1:
            raise TunerConfigError(f"trust_region: expected 0 < trust_region <= 1, got {self.trust_region!r}")
        if not 0 < self.gamma <= 1 or not 0 <= self.explore_threshold < 1:
            raise TunerConfigError(f"gamma/explore_threshold: expected 0 < gamma <= 1 and 0 <= threshold < 1, "
                                   f"got {self.gamma!r}, {self.explore_threshold!r}")
        b = self.explore_budget
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 <= b <= 1:
            raise TunerConfigError(f"explore_budget: expected a share in [0, 1], got {b!r}")
        j = self.jump_gain
        if isinstance(j, bool) or not isinstance(j, (int, float)) or not 0 < j <= 1:
            raise TunerConfigError(f"jump_gain: expected a gain in (0, 1] (1: never jump), got {j!r}")
        if self.arm_test not in ARM_TESTS:
            raise TunerConfigError(f"arm_test: expected one of {', '.join(ARM_TESTS)}, got {self.arm_test!r}")
        if self.test_unit not in ("slot", "request"):
            raise TunerConfigError(f"test_unit: expected slot or request, got {self.test_unit!r}")
        if self.switch_slots % 2:
            raise TunerConfigError(f"switch_slots: expected an even number (half candidate, half incumbent), "
                                   f"got {self.switch_slots!r}")
        f = self.arm_step_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f < 1:
            raise TunerConfigError(f"arm_step_factor: expected a finite number >= 1, got {f!r}")
        if self.max_window_s < self.window_s:
            raise TunerConfigError(f"max_window_s ({self.max_window_s}) must not be below window_s ({self.window_s})")
        if self.warmup_s >= self.window_s * 4:
            raise TunerConfigError(f"warmup_s ({self.warmup_s}) should be well below window_s ({self.window_s})")

    @property
    def switch_s(self) -> float:
        """The length of one switchback slot (warm-up included)."""
        return self.window_s / (self.switch_slots // 2) + self.switch_warmup_s
