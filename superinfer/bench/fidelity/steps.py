"""Host terms measured on the plugin's own steps (:class:`superinfer.vllm.steplog.StepLog`, recorded in the probe
replays of ``bench fidelity``): every decode step (each request one token) is priced as the twin prices it (the
calibrated step for its requests and KV context, the connector's measured park, load and sync lines, and the
per-step host terms: plugin, output processing, plan, waiting queue, arrivals added before it), and what is left
is compared between kinds of steps (docs/fidelity.md). Medians: a step that ends in an idle wait or a garbage
collection does not move them.

* ``host_resume`` (:func:`resume_line`): steps that resume ``k`` requests against steps that resume none, at
  each ``k``; ``resume_s`` is the weighted mean of ``(median left at k - median left at 0) / k``.
* ``host_waiting`` on the plugin (:func:`waiting_line`): quiet steps (no plan, park, load, resume or arrival)
  with requests waiting against the same without, in cells of equal batch size and KV context (so that what
  the calibration misprices about long contexts, which come with a queue, is not taken for the queue's cost);
  ``waiting_s`` is the mean of the cells' differences of medians, weighted by their smaller side.
* ``run_speed`` (:func:`quiet_cells`, :func:`run_speed`): the host's speed during a real run (the stock engine's
  or the plugin's), from the run's own quiet steps: their medians in cells of equal batch size, KV context
  (:data:`SPEED_KV_BIN` tokens) and queue, over the twin's price of each cell, weighted by steps. The cells are
  what ``bench fidelity`` keeps of a run's steps, so a re-score with other host terms prices them again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

#: a resume count needs this many steps to enter the estimate
MIN_STEPS = 20
#: a cell of the waiting line needs this many steps on each side (with and without requests waiting)
MIN_CELL = 10
#: the waiting line's cells: KV context in bins of this many tokens (and the batch size)
KV_BIN = 200
#: ``run_speed``'s cells: KV context in bins of this many tokens (the batch size, and whether requests wait)
SPEED_KV_BIN = 50
#: ``run_speed`` needs this many quiet steps in a run (else the run has no speed: None)
MIN_SPEED_STEPS = 200
#: the columns of :func:`quiet_cells`
CELL_COLUMNS = ("seqs", "kv_tokens", "waiting", "steps", "dt_s")


def predicted_s(cols: dict[str, np.ndarray], coefficients: Any, host: Any) -> np.ndarray:
    """The twin's price of each logged decode step (seconds; ``coefficients``: the calibration's
    :class:`~superinfer.sim.calibration.Coefficients`; ``host``: :class:`~superinfer.sim.host.HostCosts`)."""
    seqs = cols["seqs"]
    compute = np.where(seqs > 0, coefficients.predict(0.0, seqs, cols["kv_tokens"]), 0.0)
    park = np.where(cols["park_blocks"] > 0, host.park_call_s + host.park_block_s * cols["park_blocks"], 0.0)
    load = host.load_s * cols["loads"] + host.load_block_s * cols["load_blocks"]
    sync = np.where(cols["sync_blocks"] > 0, host.sync_call_s + host.sync_block_s * cols["sync_blocks"], 0.0)
    per_step = host.step_s + host.output_s + host.output_per_seq_s * seqs
    plan = cols["planned"] * (host.plan_s + host.plan_per_live_s * cols["live"])
    return (compute + park + load + sync + per_step + plan + host.waiting_s * (cols["waiting"] > 0)
            + host.arrival_s * cols["arrivals"])


def _decode(cols: dict[str, np.ndarray]) -> np.ndarray:
    """The logged steps that only decode: each scheduled request computes one token (resumed ones included)."""
    return (cols["seqs"] > 0) & (cols["tokens"] == cols["seqs"])


def _quiet(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Decode steps without a plan, park, load, resume or arrival: the steps whose price is the calibrated step
    and the per-step host terms alone."""
    return (_decode(cols) & (cols["planned"] == 0) & (cols["parks"] == 0) & (cols["loads"] == 0)
            & (cols["resumes"] == 0) & (cols["arrivals"] == 0))


def resume_line(cols: dict[str, np.ndarray], coefficients: Any, host: Any) -> dict[str, Any]:
    """``resume_s`` (seconds per resumed request, >= 0) from a step log, with what it was estimated from:
    per resume count, the steps and the median unexplained time (ms)."""
    decode = _decode(cols)
    left = (cols["dt_s"] - predicted_s(cols, coefficients, host))[decode]
    resumes = cols["resumes"][decode].astype(int)
    base = left[resumes == 0]
    by_k: dict[int, dict[str, float]] = {}
    if base.shape[0] >= MIN_STEPS:
        for k in sorted(set(resumes[resumes > 0].tolist())):
            at_k = left[resumes == k]
            if at_k.shape[0] >= MIN_STEPS:
                by_k[k] = {"steps": int(at_k.shape[0]), "left_ms": 1e3 * float(np.median(at_k))}
    base_ms = 1e3 * float(np.median(base)) if base.shape[0] else float("nan")
    weights = sum(v["steps"] for v in by_k.values())
    per = (sum(v["steps"] * (v["left_ms"] - base_ms) / k for k, v in by_k.items()) / weights) if weights else 0.0
    return {"resume_s": max(0.0, per * 1e-3), "decode_steps": int(decode.sum()),
            "without_resume": {"steps": int(base.shape[0]), "left_ms": base_ms},
            "by_resumes": {str(k): v for k, v in by_k.items()}}


def waiting_line(cols: dict[str, np.ndarray], coefficients: Any, host: Any) -> dict[str, Any]:
    """``waiting_s`` (seconds per step after whose admissions requests still wait, >= 0) from a step log, with
    the cells it was estimated from; ``waiting_s`` is None where no cell had :data:`MIN_CELL` steps on both
    sides (the caller keeps what it had). ``host.waiting_s`` itself is not part of the price compared."""
    left = cols["dt_s"] - predicted_s(cols, coefficients, replace(host, waiting_s=0.0))
    quiet = _quiet(cols)
    waits = cols["waiting"] > 0
    kv_bin = (cols["kv_tokens"] // KV_BIN).astype(int)
    cells = []
    for seqs, kv in sorted(set(zip(cols["seqs"][quiet].astype(int).tolist(), kv_bin[quiet].tolist()))):
        cell = quiet & (cols["seqs"] == seqs) & (kv_bin == kv)
        without, with_ = left[cell & ~waits], left[cell & waits]
        if without.shape[0] >= MIN_CELL and with_.shape[0] >= MIN_CELL:
            cells.append({"seqs": seqs, "kv_from": kv * KV_BIN, "steps": [int(without.shape[0]), int(with_.shape[0])],
                          "diff_ms": 1e3 * float(np.median(with_) - np.median(without))})
    if not cells:
        return {"waiting_s": None, "quiet_steps": int(quiet.sum()), "cells": []}
    weights = np.array([min(c["steps"]) for c in cells], float)
    diff = float(np.average([c["diff_ms"] for c in cells], weights=weights))
    return {"waiting_s": max(0.0, diff * 1e-3), "quiet_steps": int(quiet.sum()), "cells": cells}


def quiet_cells(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A run's quiet steps (no sync copies either) in cells of equal batch size, KV context bin and queue (some
    or none waiting): per cell the mean context, the steps and the median wall time (:data:`CELL_COLUMNS`)."""
    quiet = _quiet(cols) & (cols["sync_blocks"] == 0)
    seqs, kv, waits, dt = (cols["seqs"][quiet].astype(int), cols["kv_tokens"][quiet],
                           (cols["waiting"][quiet] > 0).astype(int), cols["dt_s"][quiet])
    key = np.stack([seqs, (kv // SPEED_KV_BIN).astype(int), waits], axis=1)
    rows = []
    for cell in np.unique(key, axis=0) if key.shape[0] else ():
        inside = np.all(key == cell, axis=1)
        rows.append((cell[0], float(np.mean(kv[inside])), cell[2], int(inside.sum()), float(np.median(dt[inside]))))
    a = np.asarray(rows, float).reshape(-1, len(CELL_COLUMNS))
    return {name: a[:, i] for i, name in enumerate(CELL_COLUMNS)}


def run_speed(cells: dict[str, np.ndarray], coefficients: Any, host: Any) -> float | None:
    """The host's speed during a run against the twin's prices: the cells' medians over their prices, weighted by
    steps (1.0: the twin's speed; 1.05: the host ran 5 % slower); None under :data:`MIN_SPEED_STEPS` quiet steps."""
    n = cells["steps"]
    if n.sum() < MIN_SPEED_STEPS:
        return None
    zero = np.zeros_like(n)
    cols = {"seqs": cells["seqs"], "kv_tokens": cells["kv_tokens"], "waiting": cells["waiting"], "park_blocks": zero,
            "loads": zero, "load_blocks": zero, "sync_blocks": zero, "planned": zero, "live": zero, "arrivals": zero}
    return float(np.sum(n * cells["dt_s"]) / np.sum(n * predicted_s(cols, coefficients, host)))
