"""Local steps asked from an Optuna study (ask/tell), inside a trust region around the incumbent.

The study's search space is fixed and normalised: one ``u:<knob>`` in [-1, 1] per tuned knob, the
direction and size of a step as a share of ``radius * step cap`` (:meth:`KnobSpace.local`). So trials
stay comparable while the incumbent moves, and a study in a persistent storage (SQLite, a journal file,
PostgreSQL) survives restarts. The value told for a trial is the candidate's attainment minus the
incumbent's, in the same phase (positive: the step helped). The trust radius grows by ``grow`` after an
accepted step and shrinks by ``shrink`` after a rejected or rolled-back one, within [``min_radius``, 1].
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from superinfer.tuner.space import KnobSpace

log = logging.getLogger("superinfer.tuner")


def _optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class LocalSearch:
    """An Optuna study of local steps. ``storage`` None: in memory."""

    def __init__(self, space: KnobSpace, radius: float = 0.5, seed: int = 0, storage: str | None = None,
                 study_name: str = "superinfer-online", min_radius: float = 0.1, grow: float = 1.5,
                 shrink: float = 0.5) -> None:
        if not 0 < min_radius <= radius <= 1:
            raise ValueError(f"trust region: expected 0 < min_radius <= radius <= 1, got {min_radius}, {radius}")
        self.space = space
        self.radius, self.min_radius, self.grow, self.shrink = float(radius), float(min_radius), grow, shrink
        self._seed, self._storage, self._name = seed, storage, study_name
        self._study = None  # created at the first step: Optuna and its storage load only when needed
        self._open: dict[int, object] = {}

    @property
    def study(self):
        if self._study is None:
            optuna = _optuna()
            self.dist = {f"u:{k}": optuna.distributions.FloatDistribution(-1.0, 1.0) for k in self.space.knobs}
            sampler = optuna.samplers.TPESampler(seed=self._seed, n_startup_trials=4, multivariate=True)
            self._study = optuna.create_study(storage=self._storage, study_name=self._name, direction="maximize",
                                              sampler=sampler, load_if_exists=True)
        return self._study

    def ask(self, incumbent: Mapping[str, float]) -> tuple[int, dict[str, float]]:
        """(trial number, candidate setting) for one step from ``incumbent``."""
        trial = self.study.ask(self.dist)
        u = {k: float(trial.params[f"u:{k}"]) for k in self.space.knobs}
        self._open[trial.number] = trial
        return trial.number, self.space.local(incumbent, u, self.radius)

    def tell(self, number: int, gain: float | None, accepted: bool) -> None:
        """Close trial ``number`` with the measured ``gain`` (None: it could not be measured) and move
        the trust radius."""
        optuna = _optuna()
        trial = self._open.pop(number, None)
        if trial is None:
            return
        if gain is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, float(gain))
        if gain is not None:
            self.radius = min(1.0, self.radius * self.grow) if accepted else max(self.min_radius, self.radius * self.shrink)

    def abandon(self) -> None:
        """Fail every open trial (the tuner is stopping or was frozen mid-trial)."""
        for number in list(self._open):
            self.tell(number, None, False)

    @property
    def trials(self) -> int:
        return len(self.study.trials) if self._study is not None else 0
