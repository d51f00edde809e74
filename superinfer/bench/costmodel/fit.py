"""GPU terms of the cost model fitted to measured profiles (issue 29, item 2).

Forms, chosen from the data (``docs/costmodel.md`` has the comparison):

* **GEMM**: a soft roofline with a fixed cost per GEMM,
  ``t = fixed + ((F / (peak · eff_flops))^q + (B / (hbm_bw · eff_bw))^q)^(1/q)``, ``F`` its FLOPs and
  ``B`` the bytes it moves (weights and activations, :meth:`LayerShard.bytes_moved`). The sharpness ``q``
  lets small and mid-sized GEMMs (a TP-8 shard at 64-512 tokens) run below both peaks at once, which is
  where the plain roofline is 30-50 % too fast; ``fixed`` is the launch-and-tail cost that decode-sized
  GEMMs show.
* **Elementwise** (norms, RoPE, activation, adds, embedding): memory traffic,
  ``t = fixed + B / (hbm_bw · eff_bw)``.
* **All-reduce**, per (fabric, ranks): ``t = latency + S / bw`` (``S`` the tensor's bytes).
* **CPU overhead**, per (GPU, TP): ``t = base + per_seq · batch``.

Fits minimise log residuals (relative error, so decode-sized rows count as much as prefill-sized ones)
with a robust loss; efficiencies are relative to the hardware profile's datasheet peaks, so a fit says
what share of the datasheet a GPU reaches. The result is a JSON terms file (:func:`save`, :func:`load`,
strict keys) that ``bench costmodel --terms`` scores.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from superinfer.bench.costmodel.files import AllReduceRow, ComputeRow, CpuRow, ProfileError, Profiles
from superinfer.bench.costmodel.ops import ELEMENTWISE, GEMMS, LayerShard

TERMS_FORMAT = "superinfer-gpu-terms/1"
US = 1e-6


@dataclass(frozen=True)
class GpuTerms:
    """One GPU's fitted compute terms. Efficiencies are shares of ``hardware``'s datasheet peaks."""

    hardware: str
    peak_flops: float
    hbm_bw: float
    gemm_eff_flops: float
    gemm_eff_bw: float
    gemm_fixed_s: float
    gemm_sharpness: float
    elementwise_eff_bw: float
    elementwise_fixed_s: float
    rows: int

    def gemm_s(self, flops: float | np.ndarray, nbytes: float | np.ndarray) -> float | np.ndarray:
        x = flops / (self.peak_flops * self.gemm_eff_flops)
        y = nbytes / (self.hbm_bw * self.gemm_eff_bw)
        q = self.gemm_sharpness
        return self.gemm_fixed_s + (x**q + y**q) ** (1.0 / q)

    def elementwise_s(self, nbytes: float | np.ndarray) -> float | np.ndarray:
        return self.elementwise_fixed_s + nbytes / (self.hbm_bw * self.elementwise_eff_bw)

    def layer_s(self, shard: LayerShard, ops: tuple[str, ...] = GEMMS + ELEMENTWISE) -> float:
        """One layer on one TP shard: the operators in ``ops`` (default: all of them), seconds."""
        total = 0.0
        for op in ops:
            if op in GEMMS:
                total += self.gemm_s(shard.gemm_flops(op), shard.bytes_moved(op))
            else:
                total += self.elementwise_s(shard.bytes_moved(op))
        return float(total)


@dataclass(frozen=True)
class LinkTerms:
    latency_s: float
    bw: float  # bytes/s
    rows: int

    def all_reduce_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bw


@dataclass(frozen=True)
class CpuTerms:
    base_s: float
    per_seq_s: float
    rows: int

    def overhead_s(self, batch: int) -> float:
        return self.base_s + self.per_seq_s * batch


@dataclass
class Terms:
    """Everything fitted from one profile folder; keys as written in the JSON file."""

    gpus: dict[str, GpuTerms]                 # by GPU folder name (a100, h100, h200)
    all_reduce: dict[str, LinkTerms]          # by "<fabric folder>/<ranks>"
    cpu: dict[str, CpuTerms]                  # by "<gpu folder>/tp<tp>"
    files: list[str]
    date: str = ""


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


def fit_links(rows: list[AllReduceRow]) -> dict[str, LinkTerms]:
    groups: dict[str, list[AllReduceRow]] = defaultdict(list)
    for r in rows:
        groups[f"{r.fabric}/{r.ranks}"].append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        size = np.array([r.size_bytes for r in rs], dtype=float)
        t = np.array([r.ms / 1e3 for r in rs])
        if len(rs) < 2 or (t <= 0).any():
            raise ProfileError(f"all-reduce {key}: too few rows with positive times to fit ({len(rs)})")
        p = _log_fit(lambda p: p[0] * US + size / (p[1] * 1e9), [20.0, 100.0], [0.0, 0.1], [5000.0, 5000.0], t)
        out[key] = LinkTerms(float(p[0]) * US, float(p[1]) * 1e9, len(rs))
    return out


def fit_cpu(rows: list[CpuRow]) -> dict[str, CpuTerms]:
    groups: dict[str, list[CpuRow]] = defaultdict(list)
    for r in rows:
        groups[f"{r.gpu}/tp{r.tp}"].append(r)
    out = {}
    for key, rs in sorted(groups.items()):
        a = np.array([[1.0, r.batch] for r in rs])
        t = np.array([r.ms / 1e3 for r in rs])
        coef, *_ = np.linalg.lstsq(a, t, rcond=None)
        out[key] = CpuTerms(float(max(coef[0], 0.0)), float(max(coef[1], 0.0)), len(rs))
    return out


def fit(profiles: Profiles, hardware_for) -> Terms:
    """Fit every GPU, link and CPU group in ``profiles``; ``hardware_for(gpu_folder)`` names the datasheet
    profile each GPU's efficiencies are relative to."""
    by_gpu: dict[str, list[ComputeRow]] = defaultdict(list)
    for r in profiles.compute:
        by_gpu[r.gpu].append(r)
    return Terms(gpus={g: fit_gpu(rows, hardware_for(g)) for g, rows in sorted(by_gpu.items())},
                 all_reduce=fit_links(profiles.all_reduce), cpu=fit_cpu(profiles.cpu), files=list(profiles.files),
                 date=datetime.now(timezone.utc).isoformat(timespec="seconds"))


# ---- the terms file ------------------------------------------------------------------------------
def to_json_dict(terms: Terms) -> dict[str, Any]:
    return {"format": TERMS_FORMAT, "date": terms.date, "files": terms.files,
            "gpus": {k: asdict(v) for k, v in terms.gpus.items()},
            "all_reduce": {k: asdict(v) for k, v in terms.all_reduce.items()},
            "cpu": {k: asdict(v) for k, v in terms.cpu.items()}}


def _build(cls, obj: Any, where: str):
    names = list(cls.__dataclass_fields__)
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object with keys {', '.join(names)}")
    unknown, missing = sorted(set(obj) - set(names)), [n for n in names if n not in obj]
    if unknown or missing:
        raise ValueError(f"{where}: " + "; ".join(([f"unknown key(s) {', '.join(unknown)}"] if unknown else [])
                                                  + ([f"missing key(s) {', '.join(missing)}"] if missing else [])))
    for n in names:
        v = obj[n]
        if n == "hardware":
            if not isinstance(v, str):
                raise ValueError(f"{where}.{n}: expected a string, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
            raise ValueError(f"{where}.{n}: expected a finite number >= 0, got {v!r}")
    return cls(**obj)


def from_json_dict(obj: Any, path: str = "<terms>") -> Terms:
    if not isinstance(obj, dict) or obj.get("format") != TERMS_FORMAT:
        raise ValueError(f"{path}: not a GPU terms file (expected \"format\": \"{TERMS_FORMAT}\")")
    extra = sorted(set(obj) - {"format", "date", "files", "gpus", "all_reduce", "cpu"})
    if extra:
        raise ValueError(f"{path}: unknown key(s) {', '.join(extra)}")
    sections = {name: obj.get(name, {}) for name in ("gpus", "all_reduce", "cpu")}
    for name, sec in sections.items():
        if not isinstance(sec, dict):
            raise ValueError(f"{path}: {name}: expected an object")
    return Terms(gpus={k: _build(GpuTerms, v, f"{path}: gpus.{k}") for k, v in sections["gpus"].items()},
                 all_reduce={k: _build(LinkTerms, v, f"{path}: all_reduce.{k}") for k, v in sections["all_reduce"].items()},
                 cpu={k: _build(CpuTerms, v, f"{path}: cpu.{k}") for k, v in sections["cpu"].items()},
                 files=list(obj.get("files", [])), date=str(obj.get("date", "")))


def save(terms: Terms, path: str | os.PathLike[str]) -> None:
    with open(path, "w") as f:
        json.dump(to_json_dict(terms), f, indent=2)
        f.write("\n")


def load(path: str | os.PathLike[str]) -> Terms:
    try:
        with open(path) as f:
            obj = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    return from_json_dict(obj, str(path))
