"""Traffic phases: features the knobs cannot change, Page-Hinkley change detection, nearest-phase labels.

Every ``slot_s`` seconds the tuner closes a :class:`FeatureSlot` of what *arrived* (and what finished)
in it, and turns it into a feature vector: ``log_rate`` (log of arrivals per second), ``log_prompt``
(mean log prompt tokens of arrivals) and ``share:<tenant>`` (each tenant's share of arrivals). None of
these depends on the scheduler's knobs. Output lengths are not used: they are seen only at finish, and
which requests finish in a slot does depend on the knobs (under overload a setting that serves short
requests first shifts the observed mean; measured: it raised false alarms).

:class:`PageHinkley` runs the two-sided Page-Hinkley test on each feature, scaled by a fixed unit
(:data:`FEATURE_SCALE`: a change of one unit is "large"; in slots with few arrivals the unit grows to
twice the feature's sampling noise, :func:`scale_of`): with ``x`` the scaled value and ``mean`` its
running mean since the last alarm, ``up = max(0, up + x - mean - delta)`` and ``down = max(0, down +
mean - x - delta)``; an alarm when either exceeds ``lam``. The statistics start after ``min_slots``
slots (the first ones only seed the mean). Slots before the first arrival ever are not fed (a daemon
starts its tuner before its engine). After an alarm every detector restarts, so a new phase is
learned from scratch. Slots with fewer than ``min_arrivals`` arrivals are not fed (too noisy; the low
load freeze covers those stretches), except for the rate, which is well defined at any load.

:func:`nearest_phase` labels a feature vector with the closest phase of an arms file (scaled Euclidean
distance over the features both have), or None when none is within ``max_distance``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

#: the size of a "large" change of each feature (units of the feature): rate and lengths on a log scale
#: (0.3 is about 35 %), tenant shares in absolute share
FEATURE_SCALE: dict[str, float] = {"log_rate": 0.3, "log_prompt": 0.3, "share": 0.15}


#: a feature's noise within one slot of ``n`` arrivals is about ``NOISE[k] / sqrt(n)`` (Poisson counts:
#: log-count sd 1/sqrt(n); log prompt lengths of the built-in workloads have an sd near 1; a share's sd
#: is at most 0.5/sqrt(n)); :class:`PageHinkley` never scales a feature below ``NOISE_Z`` times that
NOISE: dict[str, float] = {"log_rate": 1.0, "log_prompt": 1.0, "share": 0.5}
NOISE_Z = 2.0


def scale_of(name: str, arrivals: float | None = None) -> float:
    """The unit of feature ``name``: its "large change", or twice its noise in a slot of ``arrivals``."""
    kind = "share" if name.startswith("share:") else name
    base = FEATURE_SCALE[kind]
    if arrivals is None:
        return base
    return max(base, NOISE_Z * NOISE[kind] / max(float(arrivals), 1.0) ** 0.5)


@dataclass
class FeatureSlot:
    """What arrived in ``[start, start + length)``: count, summed log prompt lengths, tenants."""

    start: float
    length: float
    arrivals: int = 0
    log_prompt_sum: float = 0.0
    tenants: dict[str, int] = field(default_factory=dict)

    def arrival(self, tenant: str, prompt_tokens: int) -> None:
        self.arrivals += 1
        self.log_prompt_sum += math.log(max(int(prompt_tokens), 1))
        self.tenants[tenant] = self.tenants.get(tenant, 0) + 1

    def features(self, tenant_names: list[str], min_arrivals: int) -> dict[str, float]:
        """The slot's features; only ``log_rate`` when it holds fewer than ``min_arrivals`` arrivals."""
        out = {"log_rate": math.log(max(self.arrivals, 0.5) / self.length)}
        if self.arrivals < min_arrivals:
            return out
        out["log_prompt"] = self.log_prompt_sum / self.arrivals
        for t in tenant_names:
            out[f"share:{t}"] = self.tenants.get(t, 0) / self.arrivals
        return out


class _PH:
    __slots__ = ("n", "mean", "up", "down")

    def __init__(self) -> None:
        self.n, self.mean, self.up, self.down = 0, 0.0, 0.0, 0.0


class PageHinkley:
    """Two-sided Page-Hinkley on every feature fed (see the module docstring). :meth:`update` returns
    the names of the features that alarmed (empty: no change)."""

    def __init__(self, delta: float = 0.5, lam: float = 3.0, min_slots: int = 2) -> None:
        if not delta >= 0 or not lam > 0 or min_slots < 1:
            raise ValueError(f"page-hinkley: expected delta >= 0, lam > 0, min_slots >= 1; got {delta}, {lam}, {min_slots}")
        self.delta, self.lam, self.min_slots = float(delta), float(lam), int(min_slots)
        self._s: dict[str, _PH] = {}

    def reset(self) -> None:
        self._s.clear()

    def update(self, features: Mapping[str, float], arrivals: float | None = None) -> list[str]:
        """Feed one slot's features (``arrivals``: how many arrived in it, for the noise floor). The
        running mean is kept in the feature's own units; each deviation from it is scaled."""
        alarms = []
        for name, value in features.items():
            v = float(value)
            s = self._s.get(name)
            if s is None:
                s = self._s[name] = _PH()
            s.n += 1
            s.mean += (v - s.mean) / s.n
            if s.n <= self.min_slots:
                continue
            dev = (v - s.mean) / scale_of(name, arrivals)
            s.up = max(0.0, s.up + dev - self.delta)
            s.down = max(0.0, s.down - dev - self.delta)
            if s.up > self.lam or s.down > self.lam:
                alarms.append(name)
        if alarms:
            self.reset()
        return sorted(alarms)

    def state(self) -> dict[str, dict[str, float]]:
        return {k: {"n": s.n, "mean": round(s.mean, 4), "up": round(s.up, 4), "down": round(s.down, 4)}
                for k, s in sorted(self._s.items())}


def mean_features(slots: list[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each feature over the slots that have it."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for f in slots:
        for k, v in f.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Scaled Euclidean distance over the features both name (NaN when they share none)."""
    keys = [k for k in a if k in b]
    if not keys:
        return math.nan
    return math.sqrt(sum(((float(a[k]) - float(b[k])) / scale_of(k)) ** 2 for k in keys) / len(keys))


def nearest_phase(features: Mapping[str, float], centroids: Mapping[str, Mapping[str, float]],
                  max_distance: float) -> tuple[str | None, float]:
    """(name, distance) of the closest centroid, or (None, distance) when it is beyond ``max_distance``."""
    best, best_d = None, math.inf
    for name in sorted(centroids):
        d = distance(features, centroids[name])
        if not math.isnan(d) and d < best_d:
            best, best_d = name, d
    if best is None or best_d > max_distance:
        return None, best_d
    return best, best_d
