"""The incumbent's measurement outside trials: the observation window after each change's warm-up, and
the *baseline* it yields (the incumbent's last measurement in this traffic), which gates proposing.

:class:`BaselineWatch` owns the window and the baseline; :meth:`BaselineWatch.measure` returns a
:class:`Measured` window, :meth:`BaselineWatch.take` the baseline to propose against (once).
"""

from __future__ import annotations

from dataclasses import dataclass

from superinfer.tuner.config import TunerConfig
from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Score, Window


@dataclass(frozen=True)
class Measured:
    """An observation window closed: its ``score``; ``kept``: it had ``min_requests`` decided requests and
    is now the baseline."""

    score: Score
    kept: bool


class BaselineWatch:
    """The observation window (``obs``) and the baseline (``score``, measured in ``epoch``).

    Invariants: no window before the first arrival (``started``); the first one, and the one after a
    traffic change, start at once and span ``classify_slots`` slots (the ``baseline`` window); any other
    starts ``warmup_s`` after the last change of the applied setting (``changed_at``) and spans
    ``window_s`` (the controller sets it from the load: ``superinfer.tuner.sparse``); at most one is open,
    and none while a trial runs; a window is closed only once evaluable and not while the traffic is being
    classified; ``proposable`` only with a baseline, and a baseline is proposed against at most once
    (:meth:`take`)."""

    def __init__(self, cfg: TunerConfig, m: Measurements, now: float) -> None:
        self.cfg, self.m = cfg, m
        self.window_s = cfg.window_s  # the next window's length (sized from the arrival rate)
        self.obs: Window | None = None  # opened at the first arrival (the traffic's start is a change too)
        self.started = False
        self.changed_at = now
        self.score: Score | None = None  # the incumbent's last measurement in this traffic
        self.epoch = -1
        self.proposable = False

    def arrival(self, t: float) -> None:
        """An arrival at ``t`` (before it is measured): the first one ever opens the first window."""
        if not self.started:
            self.started = True
            self.obs = self.m.open(t, self.cfg.classify_slots * self.cfg.slot_s, "baseline")

    def changed(self, now: float) -> None:
        """The applied setting changed: the open window (of the old setting) is dropped."""
        self.changed_at = now
        self.drop_window()

    def drop_window(self) -> None:
        self.m.close(self.obs)
        self.obs = None

    def restart(self, now: float) -> None:
        """The traffic changed: the baseline is forgotten and the incumbent measured afresh from now."""
        self.forget()
        self.m.close(self.obs)
        self.obs = self.m.open(now, self.cfg.classify_slots * self.cfg.slot_s, "baseline")

    def forget(self) -> None:
        self.score, self.proposable = None, False

    def spent(self) -> None:
        """The baseline is not to be proposed against again (a trial ended without a verdict)."""
        self.proposable = False

    def measure(self, now: float, epoch: int, classifying: bool) -> Measured | None:
        """Open the next window if none is open; close it once evaluable (not while ``classifying``);
        one with ``min_requests`` decided requests becomes the baseline of ``epoch``."""
        if self.obs is None:
            self.obs = self.m.open(max(now, self.changed_at + self.cfg.warmup_s), self.window_s, "incumbent")
        if not self.m.evaluable(self.obs, now) or classifying:
            return None
        w, self.obs = self.obs, None
        self.m.close(w)
        s = self.m.score(w, now)
        kept = s.decided >= self.cfg.min_requests
        if kept:
            self.measured(s, epoch)
        return Measured(s, kept)

    def measured(self, score: Score, epoch: int) -> None:
        """``score`` is the incumbent's measurement in ``epoch`` (a window, or a trial's verdict)."""
        self.score, self.epoch, self.proposable = score, epoch, True

    def take(self, epoch: int) -> Score | None:
        """The baseline to propose against, once, if it was measured in ``epoch``."""
        if self.proposable and self.score is not None and self.epoch == epoch:
            self.proposable = False
            return self.score
        return None
