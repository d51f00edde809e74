"""What an operator (and the daemon on their behalf) does to a running tuner: change its mode, freeze or
unfreeze it, write the params themselves. A mixin of :class:`~superinfer.tuner.controller.Controller`,
whose state it acts on through the controller's own methods (``_end_trial``, ``_log``); kept apart so the
controller's file holds its decision loop.
"""

from __future__ import annotations

from collections.abc import Mapping

from superinfer.tuner.config import MODES, TunerConfigError
from superinfer.tuner.trials import Verdict


class OperatorControls:
    """The operator's side of :class:`~superinfer.tuner.controller.Controller` (see the module docstring)."""

    def set_mode(self, mode: str, now: float) -> None:
        if mode not in MODES:
            raise TunerConfigError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if mode == self.mode:
            return
        if self.trial is not None and mode != "auto":
            self._end_trial(now, Verdict.abort(f"mode changed to {mode}"))
        old, self.mode = self.mode, mode
        self.candidate = None if mode in ("off", "shadow") else self.candidate
        self.state = "off" if mode == "off" else "observe"
        self._log(now, "mode", f"{old} -> {mode}")

    def set_freeze(self, frozen: bool, now: float, why: str = "PUT /v1/tuner") -> None:
        if frozen:
            if not self.freeze.operator:
                self.freeze.operator, self.freeze.operator_why = True, why
                self._log(now, "freeze", f"operator: {why}")
                self._frozen_now(now)
        elif self.freeze.operator or self.freeze.rollback_times:
            self.freeze.unfreeze()
            self._log(now, "unfreeze", f"operator: {why}")

    def external_write(self, values: Mapping[str, float], source: str, now: float) -> None:
        """Someone other than the tuner changed the params: they become the incumbent; in ``auto`` the
        tuner freezes until an operator unfreezes it (a running trial is dropped, nothing written)."""
        new = {**self.incumbent, **{k: float(v) for k, v in values.items() if k in self.incumbent}}
        if self.trial is not None:
            self._end_trial(now, Verdict.abort(f"params written by {source}", write_back=False))
        changed = not self.space.same(new, self.applied)
        self.incumbent, self.applied = dict(new), dict(new)
        if changed:
            self.watch.changed(now)
            self.watch.forget()
        if self.mode == "auto":
            self.set_freeze(True, now, f"params written by {source}")
        elif changed:
            self._log(now, "adopt", f"params written by {source} become the incumbent")

