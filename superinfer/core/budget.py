"""The per-iteration transfer budget of design §4.

``B_xfer = floor(eta * BW * t_iter / block_bytes)`` blocks per iteration **per direction**, where BW is the
measured per-direction bandwidth *while both directions run*, ``t_iter`` the engine's iteration time and
``eta`` (about 0.8) the share of the iteration the copies may use. The bandwidth probe, the simulator and
the daemon all call this one function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from superinfer.core.types import INTEGER_PARAMS, PARAM_BOUNDS, Phase

DEFAULT_ETA = 0.8
_RUNNING = int(Phase.RUNNING)
#: ``iteration_s(prefill_tokens, prefill_attn_pairs, decode_seqs, decode_kv_tokens, prefill_ctx_tokens)``:
#: an engine's step-time model (the twin's cost model, the vLLM plugin's calibration fit)
IterationModel = Callable[[int, int, int, int, int], float]
#: bounds of ``B_xfer`` (blocks per iteration per direction) where an operator or a file sets it; the
#: engine's, not the scheduler's, so not in ``PARAM_BOUNDS`` (the tuner narrows it to the measured budget)
B_XFER_BOUNDS: tuple[int, int] = (0, 1_000_000)
#: every live-settable value (``PUT /v1/params``, the tuner): the scheduler's knobs and ``b_xfer``
LIVE_BOUNDS: dict[str, tuple[float, float]] = {**PARAM_BOUNDS, "b_xfer": B_XFER_BOUNDS}
LIVE_INTEGER: tuple[str, ...] = tuple(INTEGER_PARAMS) + ("b_xfer",)
#: a step sized by :func:`batch_token_budget` may take at most this many times the tightest TBT SLO among its
#: decodes, however much slack they banked: one gap never stalls a stream for longer (the pooled-gap
#: attainment counts such gaps as misses)
MAX_STRETCH = 4.0


def b_xfer_blocks(
    duplex_bw_bytes_per_s: float, iteration_s: float, block_bytes: int, eta: float = DEFAULT_ETA
) -> int:
    """Blocks that fit one direction of one iteration (design §4). Raises ValueError on bad input."""
    for name, value in (("duplex_bw_bytes_per_s", duplex_bw_bytes_per_s), ("iteration_s", iteration_s)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    if int(block_bytes) != block_bytes or block_bytes <= 0:
        raise ValueError(f"block_bytes: expected an integer > 0, got {block_bytes!r}")
    if not (0 < eta <= 1):
        raise ValueError(f"eta: expected 0 < eta <= 1, got {eta!r}")
    return int(math.floor(eta * duplex_bw_bytes_per_s * iteration_s / block_bytes))


def slo_token_budget(step_s: Callable[[int], float], target_s: float, decodes: int, max_tokens: int) -> int:
    """RotaSched v2's SLO-aware token budget: the most tokens an iteration may schedule so that its
    predicted time stays within ``target_s`` (a share of the tightest TBT SLO), keeping the running
    decodes inside their SLO while prefill chunks fill the rest.

    ``step_s(p)`` predicts the iteration time with ``decodes`` decodes and ``p`` prefill tokens
    (non-decreasing in ``p``; the engine's cost model or calibration fit). The budget never drops below
    ``decodes`` (decodes are never cut, even when they alone exceed the target); it is ``max_tokens``
    when there is nothing to protect or everything fits.
    """
    if decodes <= 0 or step_s(max(max_tokens - decodes, 0)) <= target_s:
        return max_tokens
    lo, hi = 0, max(max_tokens - decodes, 0)  # step_s(lo) may exceed target: then no prefill, decodes only
    while lo < hi:  # the largest p in [0, hi] with step_s(p) <= target_s
        mid = (lo + hi + 1) // 2
        if step_s(mid) <= target_s:
            lo = mid
        else:
            hi = mid - 1
    return min(max_tokens, decodes + lo)


def step_target_s(cols: Any, dec: np.ndarray, tbt_slo: np.ndarray, now: float, share: float) -> float:
    """How long a step with the decodes ``dec`` (rows of ``cols``) may take: ``share`` of the tightest TBT
    SLO among them, or of the least *room* among them where that is larger, at most :data:`MAX_STRETCH`
    times that SLO. A decode's room is how long its next gap may take with its mean TBT still within its
    SLO: ``S_B·k − (now − t_first)`` after ``k`` output tokens. The TBT SLO bounds a request's mean gap (what
    ``tbt_attainment`` scores), so a step that every decode's banked slack covers misses no TBT SLO, while a
    prefill cut to the tightest SLO regardless can miss a TTFT SLO that a whole prompt would have met (the CPU
    twin at 5 req/s: 87.0 % → 97.6 % SLO attainment, docs/measurements.md). ``tbt_slo``: per tenant."""
    sb = tbt_slo[cols.tenant[dec]]
    tight = float(sb.min())
    room = float((sb * cols.outputs[dec] - (now - cols.t_first[dec])).min())
    return share * min(max(tight, room), MAX_STRETCH * tight)


def batch_token_budget(cols: Any, rows: np.ndarray, iteration_s: IterationModel, share: float,
                       tbt_slo: np.ndarray, now: float, max_tokens: int) -> int:
    """:func:`slo_token_budget` for the requests in ``rows`` of ``cols`` (a request table or a snapshot),
    the target from :func:`step_target_s` (only the tenants decoding in this step count: an idle tenant with
    a strict SLO changes nothing): the decodes are the running rows that have an output token (their KV is
    read); a prefill chunk that continues a prompt also reads its earlier context, priced with the longest
    such context. The twin and the vLLM plugin both size RotaSched v2's iterations with this function."""
    phase, outputs = cols.phase[rows], cols.outputs[rows]
    dec = rows[(phase == _RUNNING) & (outputs > 0)]
    if dec.shape[0] == 0:
        return max_tokens
    target_s = step_target_s(cols, dec, tbt_slo, now, share)
    d, kv = int(dec.shape[0]), int(cols.num_computed[dec].sum())
    left, done = cols.num_tokens[rows] - cols.num_computed[rows], cols.num_computed[rows]
    part = done[(left > 1) & (done > 0)]
    ctx = int(part.max()) if part.shape[0] else 0
    return slo_token_budget(lambda p: iteration_s(p, p * ctx + p * (p + 1) // 2, d, kv, ctx if p else 0),
                            target_s, d, max_tokens)
