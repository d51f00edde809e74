"""Run metrics (design §6) and bootstrap summaries.

* TTFT attainment: share of *arrived* requests whose first token came within the tenant's S_F; no first
  token by the end of the run is a miss.
* TBT attainment: share of arrived requests whose mean inter-token time is within S_B (as DistServe);
  a request with one output token meets it once finished; an unfinished request with fewer than two
  tokens misses it.
* Percentiles of TTFT include requests that never got a first token, censored at the end of the run or
  when they were shed (a lower bound, so the tail is never flattered); ``served_ttft_p99_s`` is over the
  requests that got a first token.
* ``shed``: requests without a first token at their deadline (``max_queue_s``), dropped as a client's
  timeout would drop them; each is a miss of both SLOs, and ``arrived == finished + rejected + shed +
  unfinished``. ``shed_with_kv``: of those, how many held KV by then (work spent for nothing);
  ``shed_predicted``: how many were refused at arrival (``--shed-at-admission``), never waiting.
* ``throughput_tok_s``: output tokens produced during the arrival window per second of it (the drain
  after the window, dominated by a few long outputs, is left out).
* TBT gap attainment (``tbt_gap_attainment``): share of all inter-token gaps of all requests, pooled,
  within S_B (the paper's client measure; it hides a request that stalls often among many that do not).
* SLO attainment (``slo_attainment``): share of arrived requests meeting *both* SLOs, what users pay for.
* ``stall_share``: share of inter-token gaps longer than S_B. ``goodput_rps``: requests meeting both SLOs
  per second of arrivals. ``rotations_per_finished``: rotations per finished request.
  ``jain_fairness``: Jain's index over per-tenant TTFT attainment.
"""

from __future__ import annotations

import math

import numpy as np

from superinfer.core import TenantTable
from superinfer.sim.engine import Trace


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else 0.0


def run_metrics(tr: Trace, tenants: TenantTable, duration_s: float) -> dict:
    n = tr.t_arr.shape[0]
    s_f = tenants.ttft_slo[tr.tenant]
    s_b = tenants.tbt_slo[tr.tenant]
    has_first = ~np.isnan(tr.t_first)
    finished = ~np.isnan(tr.t_end)
    shed = ~np.isnan(tr.t_shed) if tr.t_shed is not None else np.zeros(n, dtype=bool)
    waited_until = np.where(shed, tr.t_shed if tr.t_shed is not None else 0.0, tr.sim_s)
    ttft = np.where(has_first, tr.t_first - tr.t_arr, waited_until - tr.t_arr)
    ttft_ok = has_first & (ttft <= s_f)
    gaps_n = np.maximum(tr.outputs - 1, 0)
    span = np.where(has_first, tr.last_token - tr.t_first, 0.0)
    mean_tbt = np.where(gaps_n > 0, span / np.maximum(gaps_n, 1), 0.0)
    tbt_ok = np.where(gaps_n > 0, mean_tbt <= s_b, finished)
    gap_slo = tenants.tbt_slo[tr.gap_tenant] if tr.gaps.size else np.zeros(0)
    gap_ok = tr.gaps <= gap_slo
    slo_ok = ttft_ok & tbt_ok
    out = {
        "arrived": int(n),
        "finished": int(finished.sum()),
        "rejected": int(tr.rejected),
        "shed": int(shed.sum()),
        "shed_share": float(shed.mean()) if n else 0.0,
        "shed_with_kv": int(tr.counters.get("shed_with_kv", 0)),
        "shed_predicted": int(tr.counters.get("shed_predicted", 0)),
        "held_steps": int(tr.counters.get("held_steps", 0)),  # steps served unplanned (superinfer.core.gate)
        "ttft_attainment": float(ttft_ok.mean()) if n else 0.0,
        "tbt_attainment": float(tbt_ok.mean()) if n else 0.0,
        "tbt_gap_attainment": float(gap_ok.mean()) if tr.gaps.size else 1.0,
        "slo_attainment": float(slo_ok.mean()) if n else 0.0,
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "served_ttft_p99_s": _pct(ttft[has_first], 99),
        "tbt_mean_p50_s": _pct(mean_tbt[gaps_n > 0], 50),
        "tbt_mean_p90_s": _pct(mean_tbt[gaps_n > 0], 90),
        "tbt_gap_p99_s": _pct(tr.gaps, 99),
        "stall_share": float((tr.gaps > gap_slo).mean()) if tr.gaps.size else 0.0,
        "throughput_tok_s": float(tr.window_tokens / duration_s) if duration_s > 0 else 0.0,
        "makespan_s": float(np.nanmax(tr.last_token)) if np.isfinite(tr.last_token).any() else 0.0,
        "goodput_rps": float((ttft_ok & tbt_ok).sum() / duration_s) if duration_s > 0 else 0.0,
        "preemptions": int(tr.counters.get("preemptions", 0)),
        "rotations": int(tr.counters.get("rotations", 0)),
        "max_rotations_per_request": int(tr.rotations.max()) if n else 0,
        "rotations_per_finished": (int(tr.counters.get("rotations", 0)) / int(finished.sum())
                                   if finished.any() else 0.0),
        "recompute_fallbacks": int(tr.counters.get("recompute_fallbacks", 0)),
        "b_xfer_blocks": int(tr.b_xfer_blocks),
        "max_swap_in_blocks_per_iter": int(tr.max_swap_in_blocks_per_iter),
        "max_swap_out_blocks_per_iter": int(tr.max_swap_out_blocks_per_iter),
        "hbm_blocks": int(tr.hbm_blocks),
        "max_hbm_blocks_used": int(tr.max_hbm_blocks_used),
        "dram_blocks": int(tr.dram_blocks),
        "bytes_h2d": int(tr.counters.get("h2d_blocks", 0)) * tr.block_bytes,
        "bytes_d2h": int(tr.counters.get("d2h_blocks", 0)) * tr.block_bytes,
        "iterations": int(tr.iterations),
        "sim_s": float(tr.sim_s),
        "wall_s": float(tr.wall_s),
    }
    out["sim_per_wall"] = out["sim_s"] / out["wall_s"] if out["wall_s"] > 0 else 0.0
    per_tenant = {}
    for i, t in enumerate(tenants.tenants):
        mask = tr.tenant == i
        if mask.any():
            per_tenant[t.name] = {
                "arrived": int(mask.sum()),
                "ttft_attainment": float(ttft_ok[mask].mean()),
                "tbt_attainment": float(tbt_ok[mask].mean()),
                "slo_attainment": float(slo_ok[mask].mean()),
                "tbt_gap_attainment": (float(gap_ok[tr.gap_tenant == i].mean()) if (tr.gap_tenant == i).any()
                                       else 1.0),
                "ttft_p99_s": _pct(ttft[mask], 99),
                "shed": int(shed[mask].sum()),
            }
    if len(per_tenant) > 1:
        out["tenants"] = per_tenant
        att = np.array([v["ttft_attainment"] for v in per_tenant.values()])
        out["jain_fairness"] = float(att.sum() ** 2 / (att.size * (att**2).sum())) if (att**2).sum() > 0 else 1.0
    return out


SUMMARY_KEYS = (
    "slo_attainment",
    "ttft_attainment",
    "tbt_attainment",
    "tbt_gap_attainment",
    "ttft_p50_s",
    "ttft_p99_s",
    "served_ttft_p99_s",
    "shed_share",
    "tbt_gap_p99_s",
    "stall_share",
    "throughput_tok_s",
    "goodput_rps",
    "preemptions",
    "rotations",
    "rotations_per_finished",
    "recompute_fallbacks",
)


def bootstrap_ci(values: list[float], seed: int = 0, resamples: int = 2000) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean; a single value gives a zero-width interval."""
    x = np.asarray(values, dtype=np.float64)
    if x.size <= 1:
        v = float(x[0]) if x.size else math.nan
        return v, v
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, (resamples, x.size))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean (``n - 1`` degrees of freedom) at ``level``; fewer than two values
    give a zero-width interval at the value (nan when there is none), as :func:`bootstrap_ci`."""
    from scipy.stats import t as student_t

    if not 0 < level < 1:
        raise ValueError(f"level: expected 0 < level < 1, got {level!r}")
    x = np.asarray(values, dtype=np.float64)
    if x.size <= 1:
        v = float(x[0]) if x.size else math.nan
        return v, v
    m = float(x.mean())
    half = float(student_t.ppf(0.5 + level / 2, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m - half, m + half


def summarise(runs: list[dict]) -> list[dict]:
    """Mean and bootstrap 95 % interval per (policy, rps, variant, share) over seeds; ``share`` (a run's
    load as a share of the engine's measured capacity, ``bench vllm --capacity-share``) only when set."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["policy"], r["rps"], r.get("variant", ""), r.get("share")), []).append(r)
    out = []
    for (policy, rps, variant, share), rs in groups.items():
        row: dict = {"policy": policy, "rps": rps, "seeds": len(rs)}
        if variant:
            row["variant"] = variant
        if share is not None:
            row["share"] = share
        for k in SUMMARY_KEYS:
            if any(k not in r for r in rs):
                continue  # runs recorded before this metric existed
            vals = [float(r[k]) for r in rs]
            lo, hi = bootstrap_ci(vals)
            row[k] = {"mean": float(np.mean(vals)), "ci95": [lo, hi]}
        out.append(row)
    return out
