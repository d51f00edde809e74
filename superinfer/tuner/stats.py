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
* worse (an offline study's arm under ``arm_test = "unless_worse"``, reject): ``(p_i - p_c) / se > z(1 - alpha)``;
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


def worse(cand: Score, inc: Score, alpha: float) -> tuple[bool, float]:
    """Is the candidate's attainment significantly below the incumbent's? Returns (verdict, z of
    ``p_i - p_c``); no requests on a side is no evidence (False)."""
    z = diff_z(inc.value, inc.n_eff, cand.value, cand.n_eff)
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


# ---- slot-level inference (switchback trials) ---------------------------------------------------
# A switchback randomises slots, not requests: requests of one slot share its queue, and near capacity
# a whole slot can collapse (attainment 0) or recover (1) together. So the unit of analysis is the slot:
# each side's share is the ratio sum(hits) / sum(decided) over its slots, its variance the cluster-robust
# (ratio-estimator) one, ``k / (k - 1) * sum_j (H_j - p D_j)^2 / (sum D)^2`` over its ``k`` slots (never
# below the binomial variance of its requests), and the difference is referred to Student's t with
# Welch-Satterthwaite degrees of freedom. With 4 slots a side that is honest and has little power: only
# differences that are consistent across slots count.

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """Student's t distribution function with ``df`` > 0 degrees of freedom."""
    if not df > 0:
        raise ValueError(f"t: expected df > 0, got {df!r}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x > 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (``df`` > 0), by bisection; the normal one past 1e6 df."""
    if not 0 < q < 1:
        raise ValueError(f"quantile: expected 0 < q < 1, got {q!r}")
    if df > 1e6:
        return z_quantile(q)
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return 0.5 * (lo + hi)


def side(slots: list[Score], weights: dict[str, float], tenant: str | None = None) -> tuple[float, float, int, int]:
    """One side of a switchback (its slots' scores; one tenant's requests, or all weighted): (share,
    variance, slots with decided requests, decided requests)."""
    rows = []
    decided = 0
    for s in slots:
        hs = ds = d2 = 0.0
        for t, (h, d) in s.per_tenant.items():
            if tenant is not None and t != tenant:
                continue
            w = 1.0 if tenant is not None else float(weights.get(t, 1.0))
            hs, ds, d2 = hs + w * h, ds + w * d, d2 + w * w * d
            decided += d
        if ds > 0:
            rows.append((hs, ds, d2))
    k = len(rows)
    if k == 0:
        return math.nan, math.inf, 0, 0
    H, D, D2 = (sum(r[i] for r in rows) for i in range(3))
    p = H / D
    wald = _var(p, D * D / D2)
    clus = k / (k - 1) * sum((h - p * d) ** 2 for h, d, _ in rows) / (D * D) if k >= 2 else math.inf
    return p, max(wald, clus), k, decided


def slot_t(cand: list[Score], inc: list[Score], weights: dict[str, float], shift: float = 0.0,
           tenant: str | None = None) -> tuple[float, float, int, int]:
    """``(p_c - p_i + shift) / se`` over slots, its Welch degrees of freedom, and the decided requests of
    each side; ``-inf`` while a side has fewer than two slots with decided requests."""
    pc, vc, kc, nc = side(cand, weights, tenant)
    pi, vi, ki, ni = side(inc, weights, tenant)
    if kc < 2 or ki < 2:
        return -math.inf, 1.0, nc, ni
    se2 = vc + vi
    df = se2 * se2 / (vc * vc / (kc - 1) + vi * vi / (ki - 1))
    return (pc - pi + shift) / math.sqrt(se2), max(df, 1.0), nc, ni


def slot_better(cand: list[Score], inc: list[Score], weights: dict[str, float], alpha: float,
                margin: float = 0.0) -> tuple[bool, float, float]:
    """Superiority (``margin`` 0) or non-inferiority within ``margin``, slot-level. (verdict, t, df)."""
    t, df, _, _ = slot_t(cand, inc, weights, margin)
    return t > t_quantile(1 - alpha, df), t, df


def slot_worse(cand: list[Score], inc: list[Score], weights: dict[str, float],
               alpha: float) -> tuple[bool, float, float]:
    """Is the candidate significantly worse than the incumbent, slot-level, one-sided at ``alpha``?
    (verdict, t of ``p_i - p_c``, df); fewer than two slots with decided requests a side is no evidence."""
    t, df, _, _ = slot_t(inc, cand, weights)
    return t > t_quantile(1 - alpha, df), t, df


def slot_guard(cand: list[Score], inc: list[Score], weights: dict[str, float], alpha: float, margin: float,
               min_requests: int) -> tuple[str | None, float, float]:
    """The first tenant (by name) whose candidate share is significantly more than ``margin`` below the
    incumbent's, slot-level, with ``min_requests`` decided on both sides; (None, best t, its df) if none."""
    tenants = sorted({t for s in cand for t in s.per_tenant} & {t for s in inc for t in s.per_tenant})
    worst, worst_df = -math.inf, 1.0
    for tenant in tenants:
        t, df, nc, ni = slot_t(inc, cand, weights, -margin, tenant)
        if nc < min_requests or ni < min_requests or t == -math.inf:
            continue
        if t > t_quantile(1 - alpha, df):
            return tenant, t, df
        if t > worst:
            worst, worst_df = t, df
    return None, worst, worst_df
