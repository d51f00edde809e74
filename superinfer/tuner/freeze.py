"""When the tuner must not change anything: the freeze reasons, and the rollback history behind one.

Reasons, in the order :attr:`Freeze.reason` reports them: ``operator`` (an operator froze it with
``PUT /v1/tuner``, or wrote the params while it ran in ``auto``; cleared only by an operator),
``rollbacks`` (``max_rollbacks_per_hour`` rollbacks in the last 3,600 s; clears as they age out, or
when an operator unfreezes, which forgets them), ``low_load`` (the recent arrival rate cannot fill even
the longest window, ``max_window_s``, with ``min_requests`` requests: ``superinfer.tuner.sparse``; clears
when it can).
"""

from __future__ import annotations

from collections import deque

HOUR_S = 3600.0
REASONS = ("operator", "rollbacks", "low_load")


class Freeze:
    def __init__(self, max_rollbacks_per_hour: int) -> None:
        self.max_rollbacks = int(max_rollbacks_per_hour)
        self.operator = False
        self.operator_why = ""
        self.low_load = False
        self.rollback_times: deque[float] = deque()

    def rollbacks_last_hour(self, now: float) -> int:
        while self.rollback_times and self.rollback_times[0] <= now - HOUR_S:
            self.rollback_times.popleft()
        return len(self.rollback_times)

    def rolled_back(self, now: float) -> None:
        self.rollback_times.append(now)

    def reason(self, now: float) -> str | None:
        if self.operator:
            return "operator"
        if self.rollbacks_last_hour(now) >= self.max_rollbacks:
            return "rollbacks"
        if self.low_load:
            return "low_load"
        return None

    def describe(self, now: float) -> str | None:
        r = self.reason(now)
        if r == "operator":
            return f"operator: {self.operator_why}" if self.operator_why else "operator"
        if r == "rollbacks":
            return f"rollbacks: {self.rollbacks_last_hour(now)} in the last hour (limit {self.max_rollbacks})"
        return r

    def unfreeze(self) -> None:
        """An operator's unfreeze: clears the operator freeze and forgets the rollbacks."""
        self.operator = False
        self.operator_why = ""
        self.rollback_times.clear()
