"""The tests behind the tuner's decisions: one-sided two-proportion z-tests on window attainments.

Each side of a comparison is a :class:`~superinfer.tuner.objective.Score`: a weighted share ``p`` over
``n`` effective requests (Kish). The standard error of a difference is the unpooled (Wald)
``sqrt(p1 (1 - p1) / n1 + p2 (1 - p2) / n2)``, with each ``p`` kept at least ``0.5 / n`` away from 0 and
1 so that two perfect windows still have a variance. Windows are treated as independent samples of
requests; requests of one window share a queue, so the true variance is larger and the nominal
``alpha`` is optimistic; the rollback counter and the freeze after too many rollbacks are the backstop.

* superiority (local steps, accept): ``(p_c - p_i) / se > z(1 - alpha)``;
* non-inferiority (an offline study's arm for the detected phase, accept): ``(p_c - p_i + margin) / se >
  z(1 - alpha)``;
* guard (any tenant, any time during a trial, roll back): ``(p_i - p_c - margin) / se > z(1 - alpha_guard)``.

:func:`required_requests` is the per-window sample size that detects a difference ``delta`` at
attainment ``p`` with the given ``alpha`` and power (normal approximation, equal windows).
"""

from __future__ import annotations

import math
from statistics import NormalDist

from superinfer.tuner.objective import Score

_N = NormalDist()


def z_quantile(q: float) -> float:
    if not 0 < q < 1:
        raise ValueError(f"quantile: expected 0 < q < 1, got {q!r}")
    return _N.inv_cdf(q)


def _var(p: float, n: float) -> float:
    if n <= 0:
        return math.inf
    eps = 0.5 / n
    p = min(max(p, eps), 1 - eps)
    return p * (1 - p) / n


def diff_z(p1: float, n1: float, p2: float, n2: float, shift: float = 0.0) -> float:
    """``(p1 - p2 + shift) / se``; ``-inf`` when either side has no request or no value."""
    if n1 <= 0 or n2 <= 0 or math.isnan(p1) or math.isnan(p2):
        return -math.inf
    return (p1 - p2 + shift) / math.sqrt(_var(p1, n1) + _var(p2, n2))


def better(cand: Score, inc: Score, alpha: float) -> tuple[bool, float]:
    """Superiority: is the candidate's attainment above the incumbent's? Returns (verdict, z)."""
    z = diff_z(cand.value, cand.n_eff, inc.value, inc.n_eff)
    return z > z_quantile(1 - alpha), z


def not_worse(cand: Score, inc: Score, alpha: float, margin: float) -> tuple[bool, float]:
    """Non-inferiority within ``margin``. Returns (verdict, z)."""
    z = diff_z(cand.value, cand.n_eff, inc.value, inc.n_eff, shift=margin)
    return z > z_quantile(1 - alpha), z


def guard_fires(cand: Score, inc: Score, alpha: float, margin: float, min_requests: int) -> tuple[str | None, float]:
    """The first tenant (sorted by name) whose candidate attainment is significantly more than ``margin``
    below the incumbent's, with at least ``min_requests`` decided on both sides; (None, best z) if none."""
    worst = -math.inf
    crit = z_quantile(1 - alpha)
    for tenant in sorted(set(cand.per_tenant) & set(inc.per_tenant)):
        pc, nc = cand.tenant(tenant)
        pi, ni = inc.tenant(tenant)
        if nc < min_requests or ni < min_requests:
            continue
        z = diff_z(pi, ni, pc, nc, shift=-margin)
        worst = max(worst, z)
        if z > crit:
            return tenant, z
    return None, worst


def below_expected(obs: Score, expected: float, alpha: float, margin: float, min_requests: int) -> tuple[bool, float]:
    """Is the observed attainment significantly more than ``margin`` below an expected value (one sample,
    the expectation taken as exact)? Used to check an offline arm after a jump."""
    if obs.decided < min_requests or math.isnan(obs.value):
        return False, -math.inf
    z = (expected - margin - obs.value) / math.sqrt(_var(obs.value, obs.n_eff))
    return z > z_quantile(1 - alpha), z


def required_requests(p: float, delta: float, alpha: float, power: float = 0.8) -> int:
    """Requests per window for a one-sided test at ``alpha`` to detect ``delta`` at attainment ``p``
    with probability ``power``: ``(z_a + z_b)^2 * 2 p (1 - p) / delta^2``."""
    if not 0 < p < 1 or not 0 < delta < 1:
        raise ValueError(f"expected 0 < p < 1 and 0 < delta < 1, got p={p!r}, delta={delta!r}")
    za, zb = z_quantile(1 - alpha), z_quantile(power)
    return int(math.ceil((za + zb) ** 2 * 2 * p * (1 - p) / delta ** 2))


def detectable_delta(n: int, p: float, alpha: float, power: float = 0.8) -> float:
    """The smallest difference :func:`required_requests` says ``n`` requests per window detect."""
    if n <= 0:
        return math.inf
    za, zb = z_quantile(1 - alpha), z_quantile(power)
    return (za + zb) * math.sqrt(2 * p * (1 - p) / n)
