"""Switchback trials: the candidate and the incumbent take turns within one trial, so both are measured
under the same traffic and the same drift.

Why: a trial that measures the incumbent first and the candidate after compares two different stretches
of time. Near capacity the queue drifts (it builds for minutes, or drains), so a sequential comparison is
biased by whatever the drift did in between, in either direction; the guard then rolls back candidates
for the drift, not for the setting. Interleaving removes that bias to first order.

Design. A trial is ``slots`` slots of ``slot_s`` seconds each (``TunerConfig.switch_s``). Slot ``k``
runs the candidate when the number of ones in ``k``'s binary digits is even, the incumbent otherwise
(the Thue-Morse order C I I C I C C I ...): over each block of 4 slots a linear trend adds the same to
both sides, over each block of 8 (the default trial) a quadratic one too. The guard watches the trial
as it runs, before a block is complete, so it sees a drift of up to one slot's length: slots are kept
short (8 per trial rather than 4) for that reason.
Arrivals in the first ``warmup_s`` of a slot are not counted (requests queued under the other side are
still being served); the rest of the slot is one :class:`~superinfer.tuner.objective.Window` of its
side, and a request counts for the side it arrived under. After the last slot the incumbent runs until
the verdict. What a switchback does not remove: carry-over (a request that arrived at a slot's end is
partly served under the next slot's setting, and a queue built by one side is inherited by the other);
it is symmetric, so it shrinks a measured difference toward zero rather than favouring either side.

Each side's score is the sum of its slots' per-tenant (hits, decided) (:func:`combine`), each slot with
its own "past its S_F" clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Score, Window

CANDIDATE, INCUMBENT = "candidate", "incumbent"


def side_of(k: int) -> str:
    """The side slot ``k`` runs (Thue-Morse: even popcount -> the candidate)."""
    if k < 0:
        raise ValueError(f"slot: expected k >= 0, got {k!r}")
    return CANDIDATE if bin(k).count("1") % 2 == 0 else INCUMBENT


def combine(windows: list[Window], m: Measurements, now: float, provisional: bool = False) -> Score:
    """One score over several windows: their per-tenant hits and decided requests summed
    (``provisional``: see :meth:`~superinfer.tuner.objective.Window.score`)."""
    per: dict[str, list[int]] = {}
    for w in windows:
        for t, (h, d) in m.score(w, now, provisional).per_tenant.items():
            acc = per.setdefault(t, [0, 0])
            acc[0] += h
            acc[1] += d
    return Score.of({t: (h, d) for t, (h, d) in per.items()}, m.weights)


@dataclass
class Switchback:
    """The slot schedule and the windows of one trial. ``k`` is the current slot (-1 before the first)."""

    slot_s: float
    warmup_s: float
    slots: int
    k: int = -1
    next_switch: float = -float("inf")
    windows: dict[str, list[Window]] = field(default_factory=lambda: {CANDIDATE: [], INCUMBENT: []})

    def __post_init__(self) -> None:
        if self.slots < 2 or self.slots % 2:
            raise ValueError(f"switchback: expected an even number of slots >= 2, got {self.slots!r}")
        if not 0 <= self.warmup_s < self.slot_s:
            raise ValueError(f"switchback: expected 0 <= warm-up < slot length, got {self.warmup_s!r}, {self.slot_s!r}")

    @property
    def done(self) -> bool:
        """Every slot has run (the incumbent runs until the verdict)."""
        return self.k >= self.slots

    def due(self, now: float) -> bool:
        return not self.done and now >= self.next_switch

    def switch(self, now: float, m: Measurements) -> str:
        """Enter the next slot at ``now``: returns the side that must run from now (the incumbent once
        every slot has run) and opens the slot's window."""
        self.k += 1
        if self.done:
            return INCUMBENT
        side = side_of(self.k)
        self.windows[side].append(m.open(now + self.warmup_s, self.slot_s - self.warmup_s, side))
        self.next_switch = now + self.slot_s
        return side

    def extend(self, slots: int, now: float) -> None:
        """Run ``slots`` more slots (an inconclusive trial gets more requests once), the next one now."""
        if self.done:
            self.k = self.slots - 1  # the next switch enters slot ``slots``
            self.next_switch = now
        self.slots += slots

    def side_now(self) -> str:
        return INCUMBENT if self.done or self.k < 0 else side_of(self.k)

    def score(self, side: str, m: Measurements, now: float, provisional: bool = False) -> Score:
        return combine(self.windows[side], m, now, provisional)

    def slot_scores(self, side: str, m: Measurements, now: float, provisional: bool = False) -> list[Score]:
        """One score per slot of ``side`` (the units of a slot-level test)."""
        return [m.score(w, now, provisional) for w in self.windows[side]]

    def all_windows(self) -> list[Window]:
        return self.windows[CANDIDATE] + self.windows[INCUMBENT]

    def evaluable(self, m: Measurements, now: float) -> bool:
        """Every slot has run and every slot's window may be evaluated (``Measurements.evaluable``)."""
        return self.done and all(m.evaluable(w, now) for w in self.all_windows())

    def close(self, m: Measurements) -> None:
        for w in self.all_windows():
            m.close(w)

    @property
    def start(self) -> float:
        ws = self.all_windows()
        return min((w.start for w in ws), default=self.next_switch)

    @property
    def end(self) -> float:
        ws = self.all_windows()
        return max((w.end for w in ws), default=self.next_switch)
