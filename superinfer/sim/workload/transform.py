"""Operations on a workload: rescale a trace's rate, window it, assign tenants, clip lengths."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from superinfer.sim.workload.spec import Workload, WorkloadError


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"{name}: expected a number > 0, got {value!r}")
    return float(value)


def rescale_factor(arrival_s: np.ndarray, rps: float, duration_s: float | None = None, source: str = "") -> float:
    """The constant that multiplies every inter-arrival time so the trace runs at ``rps``.

    With ``duration_s`` the factor puts exactly ``round(rps·duration_s)`` arrivals in ``[0, duration_s)``
    (the rate is matched on the window that will be simulated, not on the whole trace); without it, the
    whole trace's mean rate ``n / span`` becomes ``rps``. Either way the burst shape (the sequence of
    inter-arrival ratios) is unchanged.
    """
    rps = _positive("rps", rps)
    a = np.asarray(arrival_s, dtype=np.float64)
    a = a - a[0] if a.size else a
    n = a.size
    if n < 2 or a[-1] <= 0:
        raise WorkloadError(f"{source or 'trace'}: needs at least two distinct arrival times to rescale")
    if duration_s is None:
        return (n / a[-1]) / rps
    duration_s = _positive("duration", duration_s)
    wanted = int(round(rps * duration_s))
    if wanted < 1:
        raise WorkloadError(f"rps {rps} x duration {duration_s} s is less than one request")
    if wanted > n:
        raise WorkloadError(f"{source or 'trace'}: holds {n} requests but {rps} req/s for {duration_s} s needs "
                            f"{wanted}; lower --rps or --duration, or use synthetic arrivals")
    if wanted == n:
        # The whole trace fills the window: its (n+1)-th arrival, one mean inter-arrival time after the
        # last, is the one put at duration_s.
        return duration_s / (a[-1] * n / (n - 1))
    if a[wanted] <= 0:
        raise WorkloadError(f"{source or 'trace'}: the first {wanted + 1} arrivals share one timestamp")
    return duration_s / a[wanted]


def rescale(w: Workload, rps: float, duration_s: float | None = None) -> Workload:
    """Scale all inter-arrival times of ``w`` by one constant so it runs at ``rps`` (see rescale_factor)."""
    factor = rescale_factor(w.arrival_s, rps, duration_s, w.source)
    a = (w.arrival_s - w.arrival_s[0]) * factor
    if duration_s is not None:
        # a[wanted] * factor == duration_s in exact arithmetic; keep rounding from pulling it (and any
        # arrival after it) into the window [0, duration_s).
        wanted = int(round(rps * duration_s))
        a[wanted:] = np.maximum(a[wanted:], float(duration_s))
    note = f"arrivals rescaled by x{factor:.6g} (inter-arrival times) to {rps:g} req/s" + (
        f" over the first {duration_s:g} s" if duration_s is not None else " over the whole trace")
    span = float(a[-1]) if duration_s is None else w.duration_s
    return replace(w, arrival_s=a, duration_s=span, notes=[*w.notes, note])


def window(w: Workload, duration_s: float) -> Workload:
    """Keep the requests that arrive in ``[0, duration_s)``."""
    duration_s = _positive("duration", duration_s)
    keep = w.arrival_s < duration_s
    return replace(w, arrival_s=w.arrival_s[keep], prompt_tokens=w.prompt_tokens[keep],
                   output_tokens=w.output_tokens[keep], tenant_ids=w.tenant_ids[keep], duration_s=duration_s)


def assign_tenants(w: Workload, weights: dict[str, float], rng: np.random.Generator) -> Workload:
    """Give each request a tenant drawn independently with probability proportional to its weight."""
    if not isinstance(weights, dict) or not weights:
        raise WorkloadError(f"tenants: expected a non-empty mapping name -> weight, got {weights!r}")
    names = tuple(weights)
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise WorkloadError(f"tenants: tenant names must be non-empty strings, got {name!r}")
        _positive(f"tenants[{name!r}] weight", weights[name])
    p = np.array([weights[n] for n in names], dtype=np.float64)
    ids = rng.choice(len(names), size=len(w), p=p / p.sum()).astype(np.int32)
    mix = ", ".join(f"{n}={weights[n]:g}" for n in names)
    return replace(w, tenant_ids=ids, tenant_names=names, notes=[*w.notes, f"tenants assigned at random: {mix}"])


def clip_lengths(w: Workload, max_len: int) -> Workload:
    """Fit every request into ``max_len`` tokens: prompt <= max_len − 1, prompt + output <= max_len."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
        raise WorkloadError(f"max_len: expected an integer >= 2, got {max_len!r}")
    prompt = np.minimum(w.prompt_tokens, max_len - 1)
    output = np.minimum(w.output_tokens, max_len - prompt)
    clipped = int(np.count_nonzero((prompt != w.prompt_tokens) | (output != w.output_tokens)))
    notes = list(w.notes)
    if clipped:
        notes.append(f"{clipped} of {len(w)} requests clipped to max_len {max_len}")
    return replace(w, prompt_tokens=prompt, output_tokens=output, notes=notes)
