"""What operators (and the daemon on their behalf) do to a running controller: change its mode,
freeze and unfreeze it, tell it that someone else wrote the params, stop it.

A mixin of :class:`~superinfer.tuner.controller.Controller` (it uses the controller's state and its
``_end_trial``, ``_changed``, ``_log`` and ``_frozen_now``); kept apart so each file has one job.
"""

from __future__ import annotations

from collections.abc import Mapping

from superinfer.tuner.config import MODES, TunerConfigError


class OperatorControls:
    # ---- operator ---------------------------------------------------------------------------------
    def set_mode(self, mode: str, now: float) -> None:
        if mode not in MODES:
            raise TunerConfigError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if mode == self.mode:
            return
        if self.trial is not None and mode != "auto":
            self._end_trial(now, "abort", f"mode changed to {mode}", write_back=True, gain=None)
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
            self._end_trial(now, "abort", f"params written by {source}", write_back=False, gain=None)
        changed = not self.space.same(new, self.applied)
        self.incumbent, self.applied = dict(new), dict(new)
        if changed:
            self._changed(now)
            self.baseline = None
        if self.mode == "auto":
            self.set_freeze(True, now, f"params written by {source}")
        elif changed:
            self._log(now, "adopt", f"params written by {source} become the incumbent")

    def stop(self, now: float) -> None:
        """Shut down: a running trial is written back to the incumbent."""
        if self.trial is not None:
            self._end_trial(now, "abort", "tuner stopping", write_back=True, gain=None)
        self.local.abandon()

