"""How much attainment local exploration may cost: a conservative exploration budget.

A local step (a setting no study evaluated) is a gamble with a bounded upside and an unbounded
downside near capacity: a step that tips the queue into collapse takes both sides of its switchback
down with it (carry-over), so the trial's own comparison barely sees the damage, and the queue can stay
collapsed for minutes after it (measured: ``docs/tuner.md``, the stationary control). So, as in
conservative bandits (Wu et al., "Conservative Bandits", ICML 2016: explore only while the reward stays
above a fraction of the baseline's), the controller charges every local trial its *realised* loss and
offers no local step while the charges of the last ``horizon_s`` exceed ``share * horizon_s``.

The charge of a trial: ``max(0, baseline - served) * duration``, in attainment-seconds, where
``baseline`` is the incumbent's measured attainment before the trial, ``served`` the attainment of all
the trial's counted requests (both sides: what the traffic got while the trial ran) and ``duration``
the trial's length. A change of the traffic during the trial is charged to it too (conservative: it
only delays the next local step). The first local step is always allowed (nothing has been spent):
the budget bounds the rate of exploration losses, not the first one.

Invariant: charges are never negative; :meth:`spent` counts only charges of the last ``horizon_s``.
"""

from __future__ import annotations

import math
from collections import deque

from superinfer.tuner.freeze import HOUR_S


class ExplorationBudget:
    """Local-step losses of the last ``horizon_s`` against an allowance of ``share * horizon_s``
    attainment-seconds (``share`` 0.01: exploration may cost 1 % of the attainment over the horizon)."""

    def __init__(self, share: float, horizon_s: float = HOUR_S) -> None:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"explore_budget: expected a share in [0, 1], got {share!r}")
        if not horizon_s > 0:
            raise ValueError(f"horizon_s: expected > 0, got {horizon_s!r}")
        self.share, self.horizon_s = float(share), float(horizon_s)
        self.charges: deque[tuple[float, float]] = deque()  # (time, attainment-seconds), oldest first

    @property
    def allowance(self) -> float:
        return self.share * self.horizon_s

    def charge(self, now: float, baseline: float | None, served: float | None, duration_s: float) -> float:
        """Charge one ended local trial; returns the charge (0 when a score is missing or it did not lose)."""
        if baseline is None or served is None or not (math.isfinite(baseline) and math.isfinite(served)):
            return 0.0
        cost = max(0.0, baseline - served) * max(0.0, duration_s)
        if cost > 0:
            self.charges.append((now, cost))
        return cost

    def spent(self, now: float) -> float:
        while self.charges and self.charges[0][0] <= now - self.horizon_s:
            self.charges.popleft()
        return sum(c for _, c in self.charges)

    def allows(self, now: float) -> bool:
        """May a local step start now? (Always when nothing was spent in the horizon; never with share 0.)"""
        if self.share <= 0:
            return False
        return self.spent(now) < self.allowance

    def describe(self, now: float) -> str:
        return (f"local exploration lost {self.spent(now):.1f} attainment-seconds in the last "
                f"{self.horizon_s:g} s (allowance {self.allowance:g}: {self.share:g} of the time)")
