"""Judging a tenant's window against the target, and saying why attainment moves.

A share is judged only when its window holds enough samples (:data:`MIN_REQUESTS` requests,
:data:`MIN_GAPS` gaps): a window with fewer shows "—", never a green 100 %. With target T (the daemon's
``tuner.target_attainment``, default 0.9): ``BREACH`` below T, ``WARN`` from T up to halfway to 100 %
(T + (1 − T)/2, 95 % for T = 0.9), ``OK`` above. A tenant's word is the worse of its TTFT attainment
(requests with a first token in the window) and its SLO attainment (finished requests meeting both).
Percentiles are judged against the tenant's SLO: P50 over it is a breach, P99 over it a warning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OK, WARN, BREACH, UNJUDGED = "OK", "WARN", "BREACH", "—"
SEVERITY = {UNJUDGED: 0, OK: 1, WARN: 2, BREACH: 3}
MIN_REQUESTS = 10  # requests (or finished requests) a window needs before its share is judged
MIN_GAPS = 100  # inter-token gaps a window needs before the pooled gap share is judged
DEFAULT_TARGET = 0.9
TREND_SPAN_S = 30.0  # a trend compares now with this long ago
TREND_DEADBAND = 0.01  # changes smaller than 1 pp are flat


def check_target(target: float) -> float:
    """``target`` if it is a share in (0, 1], else ValueError."""
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise ValueError(f"target attainment must be within (0, 1], got {target!r}")
    return float(target)


def warn_line(target: float) -> float:
    """Attainment below this (and at or above ``target``) is a WARN."""
    target = check_target(target)
    return target + (1.0 - target) / 2.0


def classify(share: float | None, n: int | None, target: float, min_n: int = MIN_REQUESTS) -> str:
    """OK / WARN / BREACH for ``share`` of ``n`` samples against ``target``; "—" when unknown or too few."""
    check_target(target)
    if share is None or n is None or n < min_n or not math.isfinite(share):
        return UNJUDGED
    if share < target:
        return BREACH
    if share < warn_line(target):
        return WARN
    return OK


def worst(*classes: str) -> str:
    """The most severe of ``classes`` ("—" when none is judged)."""
    return max(classes, key=SEVERITY.__getitem__, default=UNJUDGED)


def percentile_class(value: float | None, slo: float | None, p50: bool) -> str:
    """A percentile against the SLO: over it is BREACH for P50, WARN for P99; "—" when unknown."""
    if value is None or slo is None:
        return UNJUDGED
    if value <= slo:
        return OK
    return BREACH if p50 else WARN


@dataclass(frozen=True)
class Verdict:
    """One tenant's window, judged."""

    ttft: str
    tbt: str
    gap: str
    slo: str
    overall: str


def judge_window(window: dict[str, Any] | None, target: float) -> Verdict:
    """The verdicts of one ``tenants.<name>.window`` of ``/v1/state``."""
    w = window or {}
    ttft = classify(w.get("ttft_attainment"), w.get("requests"), target)
    tbt = classify(w.get("tbt_attainment"), w.get("finished"), target)
    gap = classify(w.get("tbt_gap_attainment"), w.get("tbt_gaps"), target, MIN_GAPS)
    slo = classify(w.get("slo_attainment"), w.get("finished"), target)
    return Verdict(ttft, tbt, gap, slo, worst(ttft, slo))


def trend(history: Sequence[tuple[float, float]], now: float, span_s: float = TREND_SPAN_S) -> tuple[str, float | None]:
    """(arrow, change) of a share over about ``span_s``: the newest sample against the oldest kept one
    no older than ``span_s`` (at least a third of ``span_s`` apart); ("", None) without enough history."""
    if len(history) < 2:
        return "", None
    t1, v1 = history[-1]
    old = next(((t, v) for t, v in history if now - t <= span_s), None)
    if old is None or t1 - old[0] < span_s / 3:
        return "", None
    delta = v1 - old[1]
    if delta >= TREND_DEADBAND:
        return "↑", delta
    if delta <= -TREND_DEADBAND:
        return "↓", delta
    return "→", delta


@dataclass
class Context:
    """What else the explanation may cite: queues, HBM use, a recent param change or restart."""

    now: float
    window_s: float
    waiting: int | None = None
    rotary: int | None = None
    hbm_share: float | None = None
    param_change: tuple[float, int, str] | None = None  # (time, version, "alpha 3 → 4")
    restart_at: float | None = None


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _s(x: float) -> str:
    return f"{x * 1000:.0f}ms" if x < 1 else f"{x:.1f}s"


def explain(tenant: dict[str, Any], target: float, ctx: Context) -> str:
    """One line on why this tenant's attainment is where it is (``tenant``: ``tenants.<name>`` of
    ``/v1/state``)."""
    w = tenant.get("window") or {}
    parts: list[str] = []
    if ctx.restart_at is not None and ctx.now - ctx.restart_at < ctx.window_s:
        parts.append(f"daemon restarted {ctx.now - ctx.restart_at:.0f}s ago: window refilling")
    n = w.get("requests")
    if n is None or n < MIN_REQUESTS:
        parts.append(f"{n if n is not None else 0} requests in the {ctx.window_s:.0f}s window "
                     f"(< {MIN_REQUESTS}): not judged")
        return "; ".join(parts)
    line = warn_line(target)
    ttft_att, slo_ttft = w.get("ttft_attainment"), tenant.get("ttft_slo_s")
    if ttft_att is not None and ttft_att < line:
        why = f"TTFT misses {_pct(1 - ttft_att)}"
        if w.get("ttft_p99_s") is not None and slo_ttft:
            why += f" (p99 {_s(w['ttft_p99_s'])} vs SLO {_s(slo_ttft)})"
        load = []
        if ctx.waiting:
            load.append(f"{ctx.waiting} waiting")
        if ctx.hbm_share is not None and ctx.hbm_share >= 0.9:
            load.append(f"HBM {_pct(ctx.hbm_share)} full")
        parts.append(why + (": " + ", ".join(load) if load else ""))
    tbt_att, gap_att, slo_tbt = w.get("tbt_attainment"), w.get("tbt_gap_attainment"), tenant.get("tbt_slo_s")
    if (tbt_att is not None and tbt_att < line) or (gap_att is not None and gap_att < line):
        why = "TBT misses"
        if w.get("tbt_p99_s") is not None and slo_tbt:
            why += f" (gap p99 {_s(w['tbt_p99_s'])} vs SLO {_s(slo_tbt)})"
        load = []
        if w.get("rotations_per_finished"):
            load.append(f"{w['rotations_per_finished']:.1f} rotations/finished")
        if ctx.rotary:
            load.append(f"{ctx.rotary} rotary")
        parts.append(why + (": " + ", ".join(load) if load else ""))
    slo_att = w.get("slo_attainment")
    if len(parts) == 0 and slo_att is not None and slo_att < line:
        parts.append(f"{_pct(1 - slo_att)} of finished requests missed TTFT or TBT")
    if ctx.param_change is not None and ctx.now - ctx.param_change[0] < ctx.window_s:
        t, version, diff = ctx.param_change
        parts.append(f"params v{version} {ctx.now - t:.0f}s ago ({diff})")
    restart_note = 1 if parts and parts[0].startswith("daemon restarted") else 0
    if len(parts) == restart_note:
        parts.append(f"within target {_pct(target)}")
    return "; ".join(parts)
