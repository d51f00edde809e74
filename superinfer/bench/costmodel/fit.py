"""GPU terms of the cost model fitted to measured profiles (issue 29, item 2).

The forms (GEMM soft roofline with a fixed cost, elementwise memory traffic, all-reduce latency +
size/bandwidth per (fabric, ranks), CPU overhead base + per sequence) and the terms file are
:mod:`superinfer.sim.gputerms`'s; ``docs/costmodel.md`` shows why these forms. Fits minimise log
residuals (relative error, so decode-sized rows count as much as prefill-sized ones) with a robust loss;
efficiencies are shares of the hardware profile's datasheet peaks, and a fit outside
:data:`PLAUSIBLE` is refused (wrong units, wrong part).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from operator import attrgetter

import numpy as np
from scipy.optimize import least_squares

from superinfer.bench.costmodel.files import AllReduceRow, AttentionRow, ComputeRow, CpuRow, ProfileError, Profiles
from superinfer.sim.gputerms import AttentionTerms, CpuTerms, GpuTerms, LinkTerms, Terms, load, save, to_json_dict
from superinfer.sim.layerops import ELEMENTWISE, GEMMS, attention_work

US = 1e-6
__all__ = ["fit", "fit_gpu", "fit_links", "fit_cpu", "load", "save", "to_json_dict", "Terms"]


def _by(rows, key) -> list[tuple[str, list]]:
    """``rows`` grouped by ``key(row)``, in key order."""
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return sorted(groups.items())


def _log_fit(fn, x0: list[float], lower: list[float], upper: list[float], measured: np.ndarray) -> np.ndarray:
    res = least_squares(lambda p: np.log(fn(p)) - np.log(measured), x0=x0, bounds=(lower, upper),
                        loss="soft_l1", f_scale=0.1)
    return res.x


def fit_gpu(rows: list[ComputeRow], hardware) -> GpuTerms:
    """Fit one GPU's GEMM and elementwise terms to its rows (all models and TP degrees together)."""
    flops = np.array([r.shard.gemm_flops(op) for r in rows for op in GEMMS], dtype=float)
    gbytes = np.array([r.shard.bytes_moved(op) for r in rows for op in GEMMS], dtype=float)
    gtime = np.array([r.ms[op] / 1e3 for r in rows for op in GEMMS])
    ew = [(r.shard.bytes_moved(op), r.ms[op] / 1e3) for r in rows for op in ELEMENTWISE if r.ms[op] > 0]
    if len(gtime) < 8 or len(ew) < 4 or (gtime <= 0).any():
        raise ProfileError(f"{hardware.name}: too few rows with positive GEMM times to fit ({len(rows)} rows)")
    peak, bw = hardware.peak_bf16_flops, hardware.hbm_bw

    def gemm(p):
        x, y = flops / (peak * p[0]), gbytes / (bw * p[1])
        return p[2] * US + (x ** p[3] + y ** p[3]) ** (1.0 / p[3])

    g = _log_fit(gemm, [0.7, 0.8, 5.0, 4.0], [0.05, 0.05, 0.0, 1.0], [1.5, 1.5, 200.0, 50.0], gtime)
    eb, et = np.array([e[0] for e in ew], dtype=float), np.array([e[1] for e in ew])
    e = _log_fit(lambda p: p[1] * US + eb / (bw * p[0]), [0.5, 3.0], [0.01, 0.0], [1.5, 200.0], et)
    _plausible(hardware.name, {"GEMM FLOP/s": g[0], "GEMM bandwidth": g[1], "elementwise bandwidth": e[0]})
    return GpuTerms(hardware.name, peak, bw, round(float(g[0]), 4), round(float(g[1]), 4), float(g[2]) * US,
                    round(float(g[3]), 3), round(float(e[0]), 4), float(e[1]) * US, len(rows))


#: a GPU reaches at most its datasheet peaks (plus the few percent a boost clock or a rounded datasheet
#: figure allows) and, on these operators, at least a tenth of them: outside, the files' units are wrong
PLAUSIBLE = (0.1, 1.1)


def _plausible(name: str, shares: dict[str, float]) -> None:
    bad = {k: v for k, v in shares.items() if not PLAUSIBLE[0] <= v <= PLAUSIBLE[1]}
    if bad:
        got = ", ".join(f"{k} {v:.2f}x" for k, v in bad.items())
        raise ProfileError(f"{name}: the fit reaches {got} of the datasheet peak (plausible: {PLAUSIBLE[0]}-"
                           f"{PLAUSIBLE[1]}); are the times in milliseconds and the GPU folder the right part?")


def fit_attention(rows: list[AttentionRow], hardware) -> AttentionTerms:
    """Fit one GPU's attention: a roofline of its FLOPs and bytes with a fixed cost per call."""
    work = np.array([attention_work(r.shard, r.phase, r.batch, r.kv_len) for r in rows], dtype=float)
    t = np.array([r.ms / 1e3 for r in rows])
    if len(rows) < 4 or (t <= 0).any():
        raise ProfileError(f"{hardware.name}: too few attention rows with positive times to fit ({len(rows)})")
    peak, bw = hardware.peak_bf16_flops, hardware.hbm_bw
    p = _log_fit(lambda p: p[2] * US + np.maximum(work[:, 0] / (peak * p[0]), work[:, 1] / (bw * p[1])),
                 [0.6, 0.8, 5.0], [0.05, 0.05, 0.0], [1.5, 1.5, 200.0], t)
    _plausible(f"{hardware.name} attention", {"FLOP/s": p[0], "bandwidth": p[1]})
    return AttentionTerms(round(float(p[0]), 4), round(float(p[1]), 4), float(p[2]) * US, len(rows))


def fit_links(rows: list[AllReduceRow]) -> dict[str, LinkTerms]:
    out = {}
    for key, rs in _by(rows, lambda r: f"{r.fabric}/{r.ranks}"):
        size = np.array([r.size_bytes for r in rs], dtype=float)
        t = np.array([r.ms / 1e3 for r in rs])
        if len(rs) < 2 or (t <= 0).any():
            raise ProfileError(f"all-reduce {key}: too few rows with positive times to fit ({len(rs)})")
        p = _log_fit(lambda p: p[0] * US + size / (p[1] * 1e9), [20.0, 100.0], [0.0, 0.1], [5000.0, 5000.0], t)
        out[key] = LinkTerms(float(p[0]) * US, float(p[1]) * 1e9, len(rs))
    return out


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(base, per_seq)`` of ``y = base + per_seq · x`` over ``(x, y)`` points, neither below 0 (a
    falling line gets slope 0 and the mean as its base); ValueError with fewer than two distinct ``x``."""
    if len({x for x, _ in points}) < 2:
        raise ValueError("a line needs at least two batch sizes")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    slope = max(slope, 0.0)
    return max(my - slope * mx, 0.0), slope


def fit_cpu(rows: list[CpuRow]) -> dict[str, CpuTerms]:
    """An engine's CPU work per iteration as a line in the batch size, per (GPU, TP)."""
    out = {}
    for key, rs in _by(rows, lambda r: f"{r.gpu}/tp{r.tp}"):
        try:
            base, per_seq = fit_line([(r.batch, r.ms / 1e3) for r in rs])
        except ValueError as exc:
            raise ProfileError(f"cpu {key}: {exc} ({rs[0].where})") from None
        out[key] = CpuTerms(base, per_seq, len(rs))
    return out


def fit(profiles: Profiles, hardware_for) -> Terms:
    """Fit every GPU, link and CPU group in ``profiles``; ``hardware_for(gpu_folder)`` names the datasheet
    profile each GPU's efficiencies are relative to."""
    gpu = attrgetter("gpu")
    return Terms(gpus={g: fit_gpu(rows, hardware_for(g)) for g, rows in _by(profiles.compute, gpu)},
                 all_reduce=fit_links(profiles.all_reduce), cpu=fit_cpu(profiles.cpu), files=list(profiles.files),
                 date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 attention={g: fit_attention(rows, hardware_for(g)) for g, rows in _by(profiles.attention, gpu)})
