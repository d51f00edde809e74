"""The host conditions a real-engine benchmark runs under, recorded beside its latencies.

On a shared CPU host the engine's step times depend on what else runs (``HostLoad``) and on how the
benchmark itself is scheduled (``rt_throttle``): under a real-time policy (``chrt -f``) Linux lets
real-time tasks run only ``kernel.sched_rt_runtime_us`` of every ``sched_rt_period_us`` (950 ms of 1 s by
default), so an engine that is busy for a whole period stops for the rest of it. Measured on this host
(docs/fidelity.md): a stock engine at 5 req/s under ``chrt -f 10`` had 19-21 decode steps of 50 ms in 30 s,
3 % of its time, none under ``nice -n -20``; the twin, which has no such stall, looked too fast at load.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _busy_cpu_s() -> float | None:
    """Non-idle CPU seconds of the whole host since boot (``/proc/stat``), or None off Linux."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = f[3] + (f[4] if len(f) > 4 else 0)  # idle + iowait
    return (sum(f[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class HostLoad:
    """How much CPU *other* processes used while a run was timed: host busy time minus this process's.

    On a shared CPU host the engine's step times depend on it (two OpenMP threads on two cores slow
    down many-fold when a third process competes), so every run records it next to its latencies.
    """

    def __init__(self) -> None:
        self.host0, self.own0, self.wall0 = _busy_cpu_s(), _own_cpu_s(), time.monotonic()
        self.load0 = os.getloadavg()[0]

    def result(self) -> dict[str, float | None]:
        wall = time.monotonic() - self.wall0
        host1, own = _busy_cpu_s(), _own_cpu_s() - self.own0
        other = None if host1 is None or self.host0 is None else max(0.0, host1 - self.host0 - own)
        ncpu = os.cpu_count() or 1
        return {"wall_s": round(wall, 3), "own_cpu_s": round(own, 3),
                "other_cpu_s": None if other is None else round(other, 3),
                "other_cpu_share": None if other is None or wall <= 0 else round(other / (wall * ncpu), 4),
                "loadavg_1m_start": round(self.load0, 2), "loadavg_1m_end": round(os.getloadavg()[0], 2)}


def rt_throttle(policy: int | None = None, proc: Path = Path("/proc/sys/kernel")) -> float | None:
    """The share of each period a busy process of this scheduling ``policy`` (default: this process's) is
    stopped by the kernel's real-time throttling; None when it is not throttled (not a real-time policy,
    throttling off with ``sched_rt_runtime_us = -1``, or not Linux)."""
    try:
        policy = os.sched_getscheduler(0) if policy is None else policy
        rt = {os.SCHED_FIFO, os.SCHED_RR}
    except (AttributeError, OSError):
        return None
    if policy not in rt:
        return None
    try:
        runtime = int((proc / "sched_rt_runtime_us").read_text())
        period = int((proc / "sched_rt_period_us").read_text())
    except (OSError, ValueError):
        return None
    if runtime < 0 or period <= 0 or runtime >= period:
        return None
    return (period - runtime) / period
