"""The twin's ``host_resume`` term: what a resumed request costs the engine's step beyond everything the twin
already prices (docs/fidelity.md).

Measured on the plugin's own steps (:class:`superinfer.vllm.steplog.StepLog`, recorded in the probe replay that
also times the plans and the connector): every decode step (each request one token, resumed ones included) is
priced as the twin prices it (the calibrated step for its requests and KV context, the connector's measured
park, load and sync lines, and the per-step host terms: plugin, output processing, plan, waiting queue, arrivals
added before it); what is left is compared between steps that resume ``k`` requests and steps that resume none,
at each ``k``: ``resume_s`` is the weighted mean of ``(median left at k − median left at 0) / k``. Medians: a
step that ends in an idle wait or a garbage collection does not move them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: a resume count needs this many steps to enter the estimate
MIN_STEPS = 20


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


def resume_line(cols: dict[str, np.ndarray], coefficients: Any, host: Any) -> dict[str, Any]:
    """``resume_s`` (seconds per resumed request, >= 0) from a step log, with what it was estimated from:
    per resume count, the steps and the median unexplained time (ms)."""
    decode = (cols["seqs"] > 0) & (cols["tokens"] == cols["seqs"])
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
