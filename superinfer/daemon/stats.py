"""Per-tenant SLO outcomes over a recent window, for ``/v1/state`` (the TUI and the tuner read it).

For each tenant, recorded by the backend as events happen (times are ``time.monotonic()`` seconds):

* TTFT samples, at the first token (:meth:`SloWindow.first_token`);
* per-request outcomes at finish (:meth:`SloWindow.finished`): mean inter-token time against the tenant's
  S_B (DistServe's per-request TBT) and whether the request met *both* its TTFT and its TBT SLO;
* inter-token gaps (:meth:`SloWindow.gaps`), each judged against S_B (the paper's pooled-gap measure);
* rotations of the tenant's requests (:meth:`SloWindow.rotated`), only where the backend can attribute a
  rotation to a tenant (:meth:`SloWindow.track_rotations` says it can).

:meth:`SloWindow.summary` only counts what was recorded no older than ``window_s``. Per-request series
keep at most ``max_samples`` entries and gap values (for the percentiles) ``4 * max_samples`` (the
oldest drop first); gap and rotation *counts* are kept in time buckets of ``window_s / 2000`` seconds,
so they are exact at any rate, with the window's old edge moved forward by less than one bucket.
Thread-safe: the engine loop records, the API thread reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

import numpy as np

#: time buckets per window of the count series (gaps, rotations)
BUCKETS_PER_WINDOW = 2000


class _Series:
    __slots__ = ("t", "v", "ok")

    def __init__(self, maxlen: int) -> None:
        self.t: deque[float] = deque(maxlen=maxlen)
        self.v: deque[float] = deque(maxlen=maxlen)
        self.ok: deque[bool] = deque(maxlen=maxlen)

    def add(self, t: float, v: float, ok: bool) -> None:
        self.t.append(t)
        self.v.append(v)
        self.ok.append(ok)

    def window(self, since: float) -> tuple[np.ndarray, np.ndarray]:
        t = np.fromiter(self.t, np.float64, len(self.t))
        keep = t >= since
        v = np.fromiter(self.v, np.float64, len(self.v))[keep]
        ok = np.fromiter(self.ok, np.bool_, len(self.ok))[keep]
        return v, ok


class _Counts:
    """``(n, n_ok)`` counts in time buckets of ``res`` seconds: an event at ``t`` joins the newest bucket
    when that bucket started less than ``res`` earlier, else starts a new one. Invariant: the sums of all
    kept buckets are the sums of everything added since the oldest kept bucket started; with
    non-decreasing times, bucket starts are at least ``res`` apart, so ``maxlen > window / res + 1``
    keeps every bucket of a window."""

    __slots__ = ("res", "b")

    def __init__(self, res: float, maxlen: int) -> None:
        self.res = res
        self.b: deque[list] = deque(maxlen=maxlen)  # [t_start, n, n_ok]

    def add(self, t: float, n: int, n_ok: int) -> None:
        if self.b and 0.0 <= t - self.b[-1][0] < self.res:
            last = self.b[-1]
            last[1] += n
            last[2] += n_ok
        else:
            self.b.append([t, n, n_ok])

    def window(self, since: float) -> tuple[int, int]:
        n = ok = 0
        for t, bn, bok in self.b:
            if t >= since:
                n += bn
                ok += bok
        return n, ok


def _pct(x: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(x, q)), 6) if x.size else None


def _share(ok: int | float, n: int) -> float | None:
    return round(float(ok) / n, 6) if n else None


class SloWindow:
    """Recent outcomes per tenant (``tenants``: the profile's names). Times are ``time.monotonic()``
    seconds; every recording method takes ``now`` for tests and for callers that already read the clock.

    Raises ``ValueError`` for a non-positive ``window_s`` or ``max_samples``, or no tenant; recording
    for a tenant not given here raises ``KeyError``.
    """

    def __init__(self, tenants: list[str], window_s: float, max_samples: int = 20000) -> None:
        if not tenants:
            raise ValueError("SloWindow needs at least one tenant")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples!r}")
        self.window_s = float(window_s)
        res = self.window_s / BUCKETS_PER_WINDOW
        self._lock = threading.Lock()
        self._ttft = {t: _Series(max_samples) for t in tenants}
        self._tbt = {t: _Series(max_samples) for t in tenants}
        self._both = {t: _Series(max_samples) for t in tenants}  # one entry per _tbt entry
        self._gap = {t: _Series(max_samples * 4) for t in tenants}  # values, for the percentiles
        # bucket starts are >= res apart, so a window holds at most BUCKETS_PER_WINDOW + 1 of them
        nb = 2 * BUCKETS_PER_WINDOW + 2
        self._gap_n = {t: _Counts(res, nb) for t in tenants}  # counts, for the attainment
        self._rot = {t: _Counts(res, nb) for t in tenants}
        self._shed = {t: _Counts(res, nb) for t in tenants}
        self._rotations_known = False

    def first_token(self, tenant: str, ttft_s: float, ok: bool, now: float | None = None) -> None:
        """``tenant``'s request got its first token ``ttft_s`` after arrival; ``ok``: within its S_F."""
        with self._lock:
            self._ttft[tenant].add(time.monotonic() if now is None else now, ttft_s, ok)

    def finished(self, tenant: str, mean_tbt_s: float, ok: bool, now: float | None = None, *,
                 ttft_ok: bool | None) -> None:
        """``tenant``'s request finished with mean inter-token time ``mean_tbt_s`` (0 for one output
        token); ``ok``: within its S_B; ``ttft_ok``: its first token was within S_F (None: no first token
        was seen, a miss). The request meets both SLOs iff ``ok and ttft_ok``."""
        with self._lock:
            t = time.monotonic() if now is None else now
            self._tbt[tenant].add(t, mean_tbt_s, ok)
            self._both[tenant].add(t, mean_tbt_s, bool(ok and ttft_ok))

    def shed(self, tenant: str, waited_s: float, now: float | None = None) -> None:
        """``tenant``'s request was shed after waiting ``waited_s`` without a first token: a miss of both
        SLOs (it counts in ``slo_attainment`` as a request that did not meet them) and of the TTFT SLO."""
        with self._lock:
            t = time.monotonic() if now is None else now
            self._ttft[tenant].add(t, waited_s, False)
            self._both[tenant].add(t, waited_s, False)
            self._shed[tenant].add(t, 1, 0)

    def gaps(self, tenant: str, gaps_s: Sequence[float] | np.ndarray, now: float | None = None, *,
             slo_s: float) -> int:
        """Inter-token gaps of ``tenant``'s requests, observed at ``now``; a gap attains the SLO iff it is
        ``<= slo_s`` (the tenant's S_B). Returns how many attained."""
        g = np.asarray(gaps_s, dtype=np.float64)
        if g.ndim != 1:
            raise ValueError(f"gaps_s must be one-dimensional, got shape {g.shape}")
        n_ok = int(np.count_nonzero(g <= slo_s))
        now = time.monotonic() if now is None else now
        with self._lock:
            s = self._gap[tenant]
            for x in g.tolist():
                s.add(now, x, True)
            if g.size:
                self._gap_n[tenant].add(now, int(g.size), n_ok)
        return n_ok

    def track_rotations(self) -> None:
        """The backend attributes every rotation to a tenant through :meth:`rotated`; until this is
        called, ``rotations`` and ``rotations_per_finished`` are None (unknown, not zero)."""
        self._rotations_known = True

    def rotated(self, tenant: str, n: int, now: float | None = None) -> None:
        """``n`` (>= 0) rotations of ``tenant``'s requests happened at ``now``; implies
        :meth:`track_rotations`."""
        if n < 0:
            raise ValueError(f"rotations must be >= 0, got {n}")
        with self._lock:
            self._rotations_known = True
            if n:
                self._rot[tenant].add(time.monotonic() if now is None else now, int(n), 0)

    def summary(self, now: float | None = None) -> dict[str, dict]:
        """Per tenant, over what was recorded in the last ``window_s`` seconds:

        * ``requests``: first tokens and shed requests; ``ttft_attainment``: share of them within S_F;
        * ``finished``: requests that finished; ``tbt_attainment``: share of them with mean inter-token
          time within S_B; ``slo_attainment``: share of the finished and shed ones that met both S_F and
          S_B (a shed request meets neither);
        * ``shed``: requests shed at their first-token deadline;
        * ``tbt_gaps``: inter-token gaps observed; ``tbt_gap_attainment``: share of them within S_B;
        * ``rotations``: rotations of the tenant's requests (None unless the backend tracks them);
          ``rotations_per_finished``: ``rotations / finished`` (None when either is unknown or 0
          finished);
        * ``ttft_p50_s``, ``ttft_p99_s``; ``tbt_p50_s``, ``tbt_p99_s`` over the gaps.

        Shares and percentiles are None when their window holds no sample.
        """
        since = (time.monotonic() if now is None else now) - self.window_s
        out = {}
        with self._lock:
            known = self._rotations_known
            for tenant in self._ttft:
                ttft, ttft_ok = self._ttft[tenant].window(since)
                _, tbt_ok = self._tbt[tenant].window(since)
                _, both_ok = self._both[tenant].window(since)
                gaps, _ = self._gap[tenant].window(since)
                n_gaps, n_gaps_ok = self._gap_n[tenant].window(since)
                rot = self._rot[tenant].window(since)[0] if known else None
                fin = int(tbt_ok.size)
                shed = self._shed[tenant].window(since)[0]
                out[tenant] = {
                    "requests": int(ttft.size),
                    "finished": fin,
                    "ttft_attainment": _share(ttft_ok.sum(), ttft.size),
                    "tbt_attainment": _share(tbt_ok.sum(), fin),
                    "slo_attainment": _share(both_ok.sum(), both_ok.size),
                    "shed": shed,
                    "tbt_gaps": n_gaps,
                    "tbt_gap_attainment": _share(n_gaps_ok, n_gaps),
                    "rotations": rot,
                    "rotations_per_finished": round(rot / fin, 6) if rot is not None and fin else None,
                    "ttft_p50_s": _pct(ttft, 50),
                    "ttft_p99_s": _pct(ttft, 99),
                    "tbt_p50_s": _pct(gaps, 50),
                    "tbt_p99_s": _pct(gaps, 99),
                }
        return out
