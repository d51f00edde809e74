"""Per-tenant SLO outcomes over a recent window, for ``/v1/state`` (the TUI and the tuner read it).

For each tenant: TTFT samples (recorded at the first token), per-request TBT outcomes (mean inter-token
time against the tenant's SLO, DistServe's definition, recorded at finish) and inter-token gaps. Each
series keeps at most ``max_samples`` entries and :meth:`summary` only counts samples no older than
``window_s``. Thread-safe: the engine loop records, the API thread reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np


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


def _pct(x: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(x, q)), 6) if x.size else None


class SloWindow:
    """Recent outcomes per tenant. Times are ``time.monotonic()`` seconds."""

    def __init__(self, tenants: list[str], window_s: float, max_samples: int = 20000) -> None:
        self.window_s = float(window_s)
        self._lock = threading.Lock()
        self._ttft = {t: _Series(max_samples) for t in tenants}
        self._tbt = {t: _Series(max_samples) for t in tenants}
        self._gap = {t: _Series(max_samples * 4) for t in tenants}

    def first_token(self, tenant: str, ttft_s: float, ok: bool, now: float | None = None) -> None:
        with self._lock:
            self._ttft[tenant].add(time.monotonic() if now is None else now, ttft_s, ok)

    def finished(self, tenant: str, mean_tbt_s: float, ok: bool, now: float | None = None) -> None:
        with self._lock:
            self._tbt[tenant].add(time.monotonic() if now is None else now, mean_tbt_s, ok)

    def gaps(self, tenant: str, gaps_s: list[float], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            s = self._gap[tenant]
            for g in gaps_s:
                s.add(now, g, True)

    def summary(self, now: float | None = None) -> dict[str, dict]:
        """``{tenant: {requests, ttft_attainment, tbt_attainment, ttft_p50_s, ttft_p99_s, tbt_p50_s,
        tbt_p99_s, finished}}``; attainments are None when the window holds no sample."""
        since = (time.monotonic() if now is None else now) - self.window_s
        out = {}
        with self._lock:
            for tenant in self._ttft:
                ttft, ttft_ok = self._ttft[tenant].window(since)
                _, tbt_ok = self._tbt[tenant].window(since)
                gaps, _ = self._gap[tenant].window(since)
                out[tenant] = {
                    "requests": int(ttft.size),
                    "finished": int(tbt_ok.size),
                    "ttft_attainment": round(float(ttft_ok.mean()), 6) if ttft.size else None,
                    "tbt_attainment": round(float(tbt_ok.mean()), 6) if tbt_ok.size else None,
                    "ttft_p50_s": _pct(ttft, 50),
                    "ttft_p99_s": _pct(ttft, 99),
                    "tbt_p50_s": _pct(gaps, 50),
                    "tbt_p99_s": _pct(gaps, 99),
                }
        return out
