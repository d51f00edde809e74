"""Fitted GPU terms of the twin's cost model, and the file that holds them (issue 29).

The forms (``superinfer.bench.costmodel.fit`` fits them to measured profiles; ``docs/costmodel.md``
compares them with the roofline):

* **GEMM**: a soft roofline with a fixed cost per GEMM,
  ``t = fixed + ((F / (peak · eff_flops))^q + (B / (hbm_bw · eff_bw))^q)^(1/q)``, ``F`` its FLOPs, ``B``
  the bytes it moves (weights and activations, :meth:`LayerShard.bytes_moved`), ``q`` the sharpness.
* **Elementwise** (norms, RoPE, activation, adds, embedding): ``t = fixed + B / (hbm_bw · eff_bw)``.
* **Attention** (where measured): ``t = fixed + max(F / (peak · eff_flops), B / (hbm_bw · eff_bw))``
  per layer call, ``F`` and ``B`` from :func:`~superinfer.sim.layerops.attention_work`.
* **All-reduce**, per (fabric, ranks): ``t = latency + S / bw``.
* **CPU overhead**, per (GPU, TP): ``t = base + per_seq · batch``.

Efficiencies are shares of the datasheet peaks of the hardware profile named in ``hardware``. The file
is JSON with ``"format": "superinfer-gpu-terms/1"``; unknown or missing keys are errors naming the key.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from superinfer.sim.layerops import ELEMENTWISE, GEMMS, LayerShard

TERMS_FORMAT = "superinfer-gpu-terms/1"


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
class AttentionTerms:
    """One GPU's fitted attention (shares of the same datasheet peaks as its :class:`GpuTerms`)."""

    eff_flops: float
    eff_bw: float
    fixed_s: float
    rows: int

    def attention_s(self, flops: float, nbytes: float, peak_flops: float, hbm_bw: float) -> float:
        return self.fixed_s + max(flops / (peak_flops * self.eff_flops), nbytes / (hbm_bw * self.eff_bw))


def attention_or_gemm(attn: AttentionTerms | None, gpu: GpuTerms) -> AttentionTerms:
    """A part's measured attention terms, else (not measured there) its GEMM efficiencies and no fixed cost:
    the grounded twin's assumption, which the scorer prices the same way."""
    return attn if attn is not None else AttentionTerms(gpu.gemm_eff_flops, gpu.gemm_eff_bw, 0.0, 0)


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
    attention: dict[str, AttentionTerms] = field(default_factory=dict)  # by GPU folder, where measured


# ---- the terms file ------------------------------------------------------------------------------
def to_json_dict(terms: Terms) -> dict[str, Any]:
    return {"format": TERMS_FORMAT, "date": terms.date, "files": terms.files,
            "gpus": {k: asdict(v) for k, v in terms.gpus.items()},
            "all_reduce": {k: asdict(v) for k, v in terms.all_reduce.items()},
            "cpu": {k: asdict(v) for k, v in terms.cpu.items()},
            "attention": {k: asdict(v) for k, v in terms.attention.items()}}


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
    extra = sorted(set(obj) - {"format", "date", "files", "gpus", "all_reduce", "cpu", "attention"})
    if extra:
        raise ValueError(f"{path}: unknown key(s) {', '.join(extra)}")
    sections = {name: obj.get(name, {}) for name in ("gpus", "all_reduce", "cpu", "attention")}
    for name, sec in sections.items():
        if not isinstance(sec, dict):
            raise ValueError(f"{path}: {name}: expected an object")
    return Terms(gpus={k: _build(GpuTerms, v, f"{path}: gpus.{k}") for k, v in sections["gpus"].items()},
                 all_reduce={k: _build(LinkTerms, v, f"{path}: all_reduce.{k}") for k, v in sections["all_reduce"].items()},
                 cpu={k: _build(CpuTerms, v, f"{path}: cpu.{k}") for k, v in sections["cpu"].items()},
                 files=list(obj.get("files", [])), date=str(obj.get("date", "")),
                 attention={k: _build(AttentionTerms, v, f"{path}: attention.{k}")
                            for k, v in sections["attention"].items()})


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
