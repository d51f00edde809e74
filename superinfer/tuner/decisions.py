"""Records of what the tuner decided (the decision log's lines) and of the trial it is running."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from superinfer.tuner.switchback import Switchback

#: every ``action`` a decision may carry
ACTIONS = ("mode", "freeze", "unfreeze", "adopt", "phase", "hold", "propose", "advise", "trial", "jump", "fallback",
           "accept", "reject", "rollback", "abort")


@dataclass(frozen=True)
class Decision:
    """One decision: when (controller clock), what, why; the state and mode it was taken in, the traffic
    phase, and the setting it wrote or proposed (tuned knobs only; None when it touched none)."""

    t: float
    action: str
    reason: str
    state: str
    mode: str
    phase: str | None
    params: dict[str, float | int] | None = None

    def as_dict(self, at: float | None = None) -> dict[str, Any]:
        """Plain data; ``at`` is the time to report (e.g. Unix seconds), default the controller's ``t``."""
        return {"at": round(self.t if at is None else at, 3), "action": self.action, "reason": self.reason,
                "state": self.state, "mode": self.mode, "phase": self.phase, "params": self.params}


@dataclass
class Trial:
    """The running trial: which arm, since when, its switchback (the slots and the windows of both
    sides), the candidate setting, the Optuna trial number of a local step, the incumbent before it, and
    an offline arm's score in its study, and the incumbent's baseline attainment when it started."""

    arm: str
    started: float
    sb: Switchback
    setting: dict[str, float]
    number: int | None
    previous: dict[str, float]
    expected: float | None = None  # an offline arm's score in its study (reported with the verdict, not tested)
    baseline: float | None = None  # the incumbent's measured attainment when the trial started (budget)
    extended: bool = False
