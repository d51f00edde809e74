"""SLO capacity: the highest arrival rate at which a policy still meets both SLOs for a target share of
requests (issue 27: 90 %), read off a grid of rates.

A policy's capacity is where its mean ``slo_attainment`` first falls below the target as the rate rises,
interpolated linearly between the last grid rate at or above the target and the first below it (a later
recovery, from noise, does not count: the first crossing is the conservative reading). A policy below the
target at the lowest rate has a capacity under the grid (``rps`` None, ``below`` that rate); one that never
falls below it has a capacity of at least the highest rate (``at_least`` True). ``grid_rps`` is the last
grid rate at or above the target, what a reader can check in the table without interpolating.
"""

from __future__ import annotations

from typing import Any

#: the share of requests that must meet both SLOs
TARGET = 0.9


def slo_capacity(summary: list[dict[str, Any]], target: float = TARGET) -> dict[str, dict[str, Any]]:
    """Per policy (rows of :func:`superinfer.sim.metrics.summarise` without a variant), its SLO capacity."""
    if not 0 < target <= 1:
        raise ValueError(f"target: expected a share in (0, 1], got {target!r}")
    curves: dict[str, list[tuple[float, float]]] = {}
    for row in summary:
        if row.get("variant") or row.get("rps") is None:
            continue
        curves.setdefault(row["policy"], []).append((float(row["rps"]), float(row["slo_attainment"]["mean"])))
    out: dict[str, dict[str, Any]] = {}
    for policy, points in curves.items():
        points.sort()
        out[policy] = _crossing(points, target)
    return out


def _crossing(points: list[tuple[float, float]], target: float) -> dict[str, Any]:
    if points[0][1] < target:
        return {"rps": None, "grid_rps": None, "below": points[0][0], "at_least": False}
    for (r0, a0), (r1, a1) in zip(points, points[1:]):
        if a1 < target:
            rps = r0 + (r1 - r0) * (a0 - target) / (a0 - a1)
            return {"rps": rps, "grid_rps": r0, "below": None, "at_least": False}
    return {"rps": points[-1][0], "grid_rps": points[-1][0], "below": None, "at_least": True}


def capacity_ratios(capacity: dict[str, dict[str, Any]], ours: str, others: list[str]) -> dict[str, float | None]:
    """``ours``' capacity over each of ``others``' (None where either is under the grid)."""
    mine = capacity.get(ours, {}).get("rps")
    out: dict[str, float | None] = {}
    for p in others:
        theirs = capacity.get(p, {}).get("rps")
        out[p] = mine / theirs if mine is not None and theirs else None
    return out


def capacity_lines(capacity: dict[str, dict[str, Any]], target: float = TARGET) -> list[str]:
    """One printable line per policy."""
    lines = []
    for policy, c in capacity.items():
        if c["rps"] is None:
            text = f"below the grid (< {c['below']:g} req/s)"
        elif c["at_least"]:
            text = f">= {c['rps']:g} req/s (never below the target on this grid)"
        else:
            text = f"{c['rps']:.2f} req/s (grid: {c['grid_rps']:g})"
        lines.append(f"SLO capacity ({100 * target:g} % both SLOs) {policy:<14} {text}")
    return lines
