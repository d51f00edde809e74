"""Which kind of proposal to try next: discounted Thompson sampling over the arms, or stay.

An arm is a source of candidates: ``local`` (a step asked from the Optuna study inside the trust
region) and ``arm:<name>`` (a fixed setting from the offline study: the detected phase's arm and the
robust one). Each arm has a Beta posterior over "a trial of it is accepted" with prior ``Beta(a0, b0)``
(an offline arm's prior is more optimistic: the study found it best for this phase). Every decision
discounts all posteriors toward their priors by ``gamma`` (a sliding memory of about ``1 / (1 - gamma)``
decisions, so an arm that stopped working is tried again later and a changed world is relearned); a
detected phase change resets them. :meth:`choose` draws one sample per arm and returns the best arm if
its sample exceeds ``explore_threshold``, else None: stay on the incumbent and observe. As trials of an
arm keep failing, its samples drop below the threshold and the tuner explores less (a stationary
workload converges to mostly observing).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class ArmStats:
    prior_a: float
    prior_b: float
    a: float
    b: float

    def discount(self, gamma: float) -> None:
        self.a = self.prior_a + gamma * (self.a - self.prior_a)
        self.b = self.prior_b + gamma * (self.b - self.prior_b)


class DiscountedThompson:
    """Arms by name; see the module docstring. ``seed`` makes the draws reproducible."""

    def __init__(self, gamma: float = 0.9, explore_threshold: float = 0.25, seed: int = 0) -> None:
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma: expected 0 < gamma <= 1, got {gamma!r}")
        if not 0 <= explore_threshold < 1:
            raise ValueError(f"explore_threshold: expected 0 <= t < 1, got {explore_threshold!r}")
        self.gamma, self.threshold = float(gamma), float(explore_threshold)
        self.rng = random.Random(seed)
        self.arms: dict[str, ArmStats] = {}

    def ensure(self, name: str, prior: tuple[float, float] = (1.0, 1.0)) -> None:
        if name not in self.arms:
            a, b = prior
            if not (a > 0 and b > 0):
                raise ValueError(f"arm {name!r}: prior must be positive, got {prior!r}")
            self.arms[name] = ArmStats(a, b, a, b)

    def reset(self) -> None:
        """Back to the priors (a traffic phase change)."""
        for s in self.arms.values():
            s.a, s.b = s.prior_a, s.prior_b

    def choose(self, names: Iterable[str]) -> tuple[str | None, dict[str, float]]:
        """Sample every arm in ``names`` (each must be known); (best arm or None to stay, the samples)."""
        samples = {n: self.rng.betavariate(self.arms[n].a, self.arms[n].b) for n in sorted(names)}
        if not samples:
            return None, samples
        best = max(samples, key=lambda n: (samples[n], n))
        return (best if samples[best] > self.threshold else None), samples

    def update(self, name: str, success: bool) -> None:
        """One trial of ``name`` ended; every arm is discounted first."""
        for s in self.arms.values():
            s.discount(self.gamma)
        s = self.arms[name]
        if success:
            s.a += 1.0
        else:
            s.b += 1.0

    def mean(self, name: str) -> float:
        s = self.arms[name]
        return s.a / (s.a + s.b)

    def to_dict(self) -> dict:
        return {n: [round(s.prior_a, 6), round(s.prior_b, 6), round(s.a, 6), round(s.b, 6)]
                for n, s in sorted(self.arms.items())}

    def load(self, data: dict) -> None:
        for n, v in data.items():
            if isinstance(v, list) and len(v) == 4 and all(isinstance(x, (int, float)) and x > 0 for x in v):
                self.arms[n] = ArmStats(*(float(x) for x in v))
