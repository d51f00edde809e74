"""``$SUPERINFER_STATS_FILE``: where RotaScheduler publishes its counters for the daemon (``/v1/state``).

Invariants: the file is replaced atomically (a reader sees a whole document or the previous one); while
requests run it is rewritten at most every ``period_s`` (:meth:`StatsFile.due`); a failed write is
logged and never stops the engine.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, Callable

from superinfer.jsonfile import write_json_atomic

log = logging.getLogger(__name__)
ENV_STATS_FILE = "SUPERINFER_STATS_FILE"


def add_plan_time(stats: Counter[str], t0_ns: int, live: int) -> None:
    """Accumulate a plan's wall time (plan and apply, ns, since ``t0_ns``) against the live requests: the sums
    of a least-squares line ``ns = a + b * live`` (the twin's ``host_plan`` term)."""
    ns = time.perf_counter_ns() - t0_ns
    stats["plan_timed"] += 1
    stats["plan_ns"] += ns
    stats["plan_live"] += live
    stats["plan_live_sq"] += live * live
    stats["plan_ns_x_live"] += ns * live


class StatsFile:
    """The stats file of one engine (``path`` None: publishing is off)."""

    def __init__(self, path: str | None, period_s: float = 1.0) -> None:
        self.path = path or None
        self.period_s = period_s
        self._at = 0.0

    def due(self) -> bool:
        return self.path is not None and time.monotonic() - self._at >= self.period_s

    def write(self, document: Callable[[], dict[str, Any]]) -> None:
        """Replace the file with ``document()`` (built only when publishing is on)."""
        if self.path is None:
            return
        self._at = time.monotonic()
        try:
            write_json_atomic(self.path, {**document(), "published_at": time.time()}, indent=None, durable=False)
        except (OSError, TypeError, ValueError) as exc:
            log.error("RotaScheduler: cannot write stats to %s: %s", self.path, exc)
