"""Synthetic arrival processes, all driven by a caller's ``numpy.random.Generator`` (seeded upstream).

* ``poisson``: exponential inter-arrival times with mean ``1/rate``.
* ``gamma:<b>``: vLLM's ``--burstiness`` convention (``benchmarks/benchmark_serving.py``): inter-arrival
  times ~ Gamma(shape=b, scale=1/(rate·b)); mean ``1/rate``, coefficient of variation ``1/sqrt(b)``.
  ``b = 1`` is Poisson, ``b < 1`` burstier, ``b > 1`` more regular.
* ``hawkes[:<n>[:<decay>]]``: a self-exciting (Hawkes) process with exponential kernel: intensity
  ``λ(t) = μ + Σ_{t_i < t} n·β·exp(−β (t − t_i))``. ``n`` is the branching ratio (expected direct
  "children" per arrival, must be < 1 for stationarity), ``β`` the decay rate in 1/s (a burst's
  offspring follow after Exp(β) delays, mean 1/β seconds). The stationary mean rate is ``μ/(1 − n)``, so
  ``μ = rate·(1 − n)``. Defaults: n = 0.5 (half the traffic arrives as follow-ups inside bursts),
  β = 2 /s (bursts last ~0.5 s). Simulated exactly by the cluster (branching) representation, with a
  burn-in of ``20/β`` seconds before 0 so the window starts in the stationary regime.
"""

from __future__ import annotations

import math

import numpy as np

from superinfer.sim.workload.spec import WorkloadError

HAWKES_DEFAULT_BRANCHING = 0.5
HAWKES_DEFAULT_DECAY_PER_S = 2.0


def _check(rate: float, duration_s: float) -> None:
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise WorkloadError(f"arrival rate: expected a number > 0 requests/s, got {rate!r}")
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise WorkloadError(f"duration: expected a number of seconds > 0, got {duration_s!r}")


def _renewal(rng: np.random.Generator, draw, rate: float, duration_s: float) -> np.ndarray:
    """Cumulative sums of i.i.d. gaps from ``draw(n)`` until ``duration_s`` is passed."""
    expected = rate * duration_s
    chunk = int(expected + 6 * math.sqrt(expected) + 16)
    times = np.cumsum(draw(chunk))
    while times[-1] < duration_s:
        more = np.cumsum(draw(chunk)) + times[-1]
        times = np.concatenate([times, more])
    return times[times < duration_s]


def poisson(rng: np.random.Generator, rate: float, duration_s: float) -> np.ndarray:
    _check(rate, duration_s)
    return _renewal(rng, lambda n: rng.exponential(1.0 / rate, n), rate, duration_s)


def gamma(rng: np.random.Generator, rate: float, duration_s: float, burstiness: float) -> np.ndarray:
    _check(rate, duration_s)
    if not (isinstance(burstiness, (int, float)) and math.isfinite(burstiness) and burstiness > 0):
        raise WorkloadError(f"gamma burstiness: expected a number > 0, got {burstiness!r}")
    scale = 1.0 / (rate * burstiness)
    return _renewal(rng, lambda n: rng.gamma(burstiness, scale, n), rate, duration_s)


def hawkes(rng: np.random.Generator, rate: float, duration_s: float,
           branching: float = HAWKES_DEFAULT_BRANCHING, decay_per_s: float = HAWKES_DEFAULT_DECAY_PER_S) -> np.ndarray:
    _check(rate, duration_s)
    if not (isinstance(branching, (int, float)) and 0 <= branching < 1):
        raise WorkloadError(f"hawkes branching ratio: expected 0 <= n < 1, got {branching!r}")
    if not (isinstance(decay_per_s, (int, float)) and math.isfinite(decay_per_s) and decay_per_s > 0):
        raise WorkloadError(f"hawkes decay: expected a rate > 0 per second, got {decay_per_s!r}")
    burn_in = 20.0 / decay_per_s
    mu = rate * (1.0 - branching)
    span = duration_s + burn_in
    generation = rng.uniform(-burn_in, duration_s, rng.poisson(mu * span))
    events = [generation]
    while generation.size:
        children = rng.poisson(branching, generation.size)
        parents = np.repeat(generation, children)
        generation = parents + rng.exponential(1.0 / decay_per_s, parents.size)
        generation = generation[generation < duration_s]
        events.append(generation)
    times = np.concatenate(events)
    times = times[times >= 0.0]
    times.sort()
    return times


def parse_arrival(spec: str) -> tuple[str, tuple[float, ...]]:
    """``poisson`` | ``gamma:<b>`` | ``hawkes[:<n>[:<decay>]]`` | ``trace`` -> (kind, parameters)."""
    if not isinstance(spec, str) or not spec.strip():
        raise WorkloadError(f"arrival: expected poisson, gamma:<b>, hawkes[:<n>[:<decay>]] or trace, got {spec!r}")
    kind, *params = spec.strip().lower().split(":")
    try:
        values = tuple(float(p) for p in params)
    except ValueError:
        raise WorkloadError(f"arrival {spec!r}: parameters must be numbers") from None
    if kind in ("poisson", "trace") and not values:
        return kind, ()
    if kind == "gamma" and len(values) == 1:
        if not (math.isfinite(values[0]) and values[0] > 0):
            raise WorkloadError(f"arrival {spec!r}: burstiness must be > 0")
        return kind, values
    if kind == "hawkes" and len(values) <= 2:
        branching = values[0] if values else HAWKES_DEFAULT_BRANCHING
        decay = values[1] if len(values) > 1 else HAWKES_DEFAULT_DECAY_PER_S
        if not 0 <= branching < 1:
            raise WorkloadError(f"arrival {spec!r}: branching ratio must be in [0, 1)")
        if not (math.isfinite(decay) and decay > 0):
            raise WorkloadError(f"arrival {spec!r}: decay must be > 0 per second")
        return kind, (branching, decay)
    raise WorkloadError(f"arrival {spec!r}: expected poisson, gamma:<b>, hawkes[:<n>[:<decay>]] or trace")


def generate(kind: str, params: tuple[float, ...], rng: np.random.Generator, rate: float,
             duration_s: float) -> np.ndarray:
    if kind == "poisson":
        return poisson(rng, rate, duration_s)
    if kind == "gamma":
        return gamma(rng, rate, duration_s, params[0])
    if kind == "hawkes":
        return hawkes(rng, rate, duration_s, *params)
    raise WorkloadError(f"arrival kind {kind!r} is not a synthetic process")
