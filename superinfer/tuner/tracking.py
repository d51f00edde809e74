"""What the tuner learns from the traffic itself: feature slots into Page-Hinkley (a detected change),
naming the phase from the arms file, and the recent arrival rate behind the low-load freeze.

:class:`TrafficTracker` owns that state and *returns* what it saw: a :class:`TrafficChange` or a
:class:`PhaseNamed` per closed feature slot, a :class:`Load` per tick. What the controller does about
them (abort a trial, forget the baseline, go to the phase's arm, freeze) is the controller's
(:mod:`superinfer.tuner.controller`); which arm and whether to jump, the chooser's
(:mod:`superinfer.tuner.chooser`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from superinfer.tuner.arms import Arms
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.measure import rate_of
from superinfer.tuner.phase import PageHinkley, mean_features, nearest_phase
from superinfer.tuner.sparse import too_sparse, window_for

#: a settling classification that names no phase is tried again on the next slot at most this often
CLASSIFY_RETRIES = 4


@dataclass(frozen=True)
class TrafficChange:
    """Page-Hinkley alarmed on ``alarms``: a new epoch began; ``before`` is the phase it ended (the
    tracker's phase is now None)."""

    alarms: tuple[str, ...]
    before: str | None


@dataclass(frozen=True)
class PhaseNamed:
    """The traffic was classified as ``phase`` (None: no phase of the arms file within
    ``phase_max_distance``) at ``distance``; ``renamed``: it differs from the name before; ``settle``:
    this classification ends the measurement after a change (or the start), the moment to go to the
    phase's arm."""

    phase: str | None
    distance: float
    renamed: bool
    settle: bool


@dataclass(frozen=True)
class Load:
    """The recent arrival rate (req/s, NaN before any slot), whether it is too low to fill even the
    longest window with ``min_requests`` requests (the ``low_load`` freeze), and the window that rate
    needs (``superinfer.tuner.sparse``)."""

    rate: float
    low: bool
    window_s: float


class TrafficTracker:
    """Feature slots in, traffic events out (see the module docstring).

    Invariants: ``epoch`` counts the changes detected (never decreases: a measurement from an older
    epoch is stale); ``phase`` is None from a change until a classification names one; ``phase_slots``
    holds only slots of the current epoch; ``pending`` (slots left until the settling classification)
    is None exactly when none is due: ``classify_slots`` at the start and after each change, and an
    unnamed settling classification is retried one slot later at most :data:`CLASSIFY_RETRIES` times
    per epoch; between settling classifications the phase is renamed every 4th slot, never with
    ``settle``; no slot is fed (to ``recent`` or Page-Hinkley) before the first arrival ever."""

    def __init__(self, cfg: TunerConfig, arms: Arms) -> None:
        self.cfg, self.arms = cfg, arms
        self.ph = PageHinkley(cfg.ph_delta, cfg.ph_lambda)
        self.recent: deque[dict[str, float]] = deque(maxlen=max(1, int(math.ceil(cfg.window_s / cfg.slot_s))))
        self.epoch = 0
        self.phase: str | None = None
        self.phase_slots: list[dict[str, float]] = []
        self.pending: int | None = cfg.classify_slots  # at start, as after a change: name, go to the arm
        self.tries = 0

    @property
    def classifying(self) -> bool:
        """The incumbent is being measured in new traffic until a settling classification."""
        return self.pending is not None

    def slot(self, features: dict[str, float], arrivals_total: int) -> TrafficChange | PhaseNamed | None:
        """Feed one closed slot's features (``Measurements.closed_slots``; its ``_arrivals`` entry is
        removed); ``arrivals_total``: arrivals ever. Returns what it showed, or None."""
        n = features.pop("_arrivals", None)
        if arrivals_total == 0:
            return None  # nothing has arrived yet: no traffic to learn from (see superinfer.tuner.phase)
        self.recent.append(features)
        alarms = self.ph.update(features, n)
        if alarms:
            before = self.phase
            self.epoch += 1
            self.phase_slots = []
            self.pending = self.cfg.classify_slots
            self.tries = 0
            self.phase = None
            return TrafficChange(tuple(alarms), before)
        self.phase_slots.append(features)
        if self.pending is not None:
            self.pending -= 1
            if self.pending > 0:
                return None
            self.pending = None
            named = self._classify(settle=True)
            if self.phase is None and self.tries < CLASSIFY_RETRIES:  # not named yet: try the next slot
                self.tries += 1
                self.pending = 1
            return named
        if len(self.phase_slots) % 4 == 0:
            return self._classify(settle=False)
        return None

    def _classify(self, settle: bool) -> PhaseNamed | None:
        feats = mean_features(self.phase_slots[-8:])
        name, d = nearest_phase(feats, self.arms.centroids(), self.cfg.phase_max_distance)
        renamed = name != self.phase
        self.phase = name
        return PhaseNamed(name, d, renamed, settle) if renamed or settle else None

    def load(self) -> Load:
        """The recent arrival rate, whether it is low (at least two slots seen, or one when a window
        holds one slot) and the window it needs."""
        rate = rate_of(list(self.recent))
        low = (not math.isnan(rate)) and len(self.recent) >= min(2, self.recent.maxlen) and \
            too_sparse(self.cfg, rate)
        return Load(rate, low, window_for(self.cfg, rate))
