"""``load_workload``: the one entry the simulator CLI calls (a trace path or a synthetic name)."""

from __future__ import annotations

import os

import numpy as np

from superinfer.sim.workload import arrivals as arrival_processes
from superinfer.sim.workload import servegen
from superinfer.sim.workload.lengths import LENGTHS
from superinfer.sim.workload.readers import FORMATS, TraceData, read_trace
from superinfer.sim.workload.spec import Workload, WorkloadError
from superinfer.sim.workload.transform import assign_tenants, clip_lengths, rescale, window


def split_spec(spec: str) -> tuple[str | None, str]:
    """``"azure:path"`` -> ("azure", "path"); a plain path -> (None, path)."""
    head, sep, rest = spec.partition(":")
    if sep and head.lower() in FORMATS:
        return head.lower(), rest
    return None, spec


def _trace_workload(trace: TraceData, arrival: str, params: tuple[float, ...], rps: float | None,
                    duration_s: float | None, rngs: list[np.random.Generator]) -> Workload:
    tenant_names: tuple[str, ...] = ("default",)
    tenant_ids = np.zeros(len(trace), dtype=np.int32)
    if trace.tenants is not None:
        tenant_names = tuple(dict.fromkeys(trace.tenants))
        index = {name: i for i, name in enumerate(tenant_names)}
        tenant_ids = np.array([index[t] for t in trace.tenants], dtype=np.int32)
    meta = dict(source=f"{trace.format}:{trace.path}", skipped=trace.skipped, dropped=dict(trace.dropped))
    if arrival == "trace":
        if trace.arrival_s is None:
            raise WorkloadError(f"{trace.path}: this {trace.format} file has no arrival times; use --arrival "
                                "poisson, gamma:<b> or hawkes (with --rps)")
        order = np.argsort(trace.arrival_s, kind="stable")
        a = trace.arrival_s[order]
        w = Workload(arrival_s=a - a[0], prompt_tokens=trace.prompt_tokens[order],
                     output_tokens=trace.output_tokens[order], tenant_ids=tenant_ids[order],
                     tenant_names=tenant_names, arrival="trace", duration_s=float(a[-1] - a[0]), **meta)
        if rps is not None:
            w = rescale(w, rps, duration_s)
        if duration_s is not None:
            w = window(w, duration_s)
        return w

    # Synthetic arrivals, the trace's lengths (README of the shared traces: "resample arrivals and keep
    # only the lengths").
    if duration_s is None:
        raise WorkloadError("duration: synthetic arrivals need a duration in seconds")
    order = np.argsort(trace.arrival_s, kind="stable") if trace.arrival_s is not None else np.arange(len(trace))
    notes = []
    if rps is None:
        if trace.arrival_s is None or len(trace) < 2 or trace.arrival_s.max() <= 0:
            raise WorkloadError(f"{trace.path}: no arrival times to take a rate from; give --rps")
        rps = len(trace) / float(trace.arrival_s.max())
        notes.append(f"rate {rps:.4g} req/s taken from the trace's mean rate")
    times = arrival_processes.generate(arrival, params, rngs[0], rps, duration_s)
    n = times.size
    if n <= len(trace):
        pick = order[np.sort(rngs[1].permutation(len(trace))[:n])]
        notes.append(f"lengths: {n} of {len(trace)} trace requests drawn without replacement")
    else:
        pick = order[rngs[1].integers(0, len(trace), n)]
        notes.append(f"lengths: {n} draws with replacement from {len(trace)} trace requests")
    return Workload(arrival_s=times, prompt_tokens=trace.prompt_tokens[pick], output_tokens=trace.output_tokens[pick],
                    tenant_ids=tenant_ids[pick], tenant_names=tenant_names, arrival=arrival, duration_s=float(duration_s),
                    notes=notes, **meta)


def load_workload(spec: str, arrival: str = "poisson", rps: float | None = None, duration_s: float | None = 120.0,
                  seed: int = 0, skip_bad: bool = False, tenants: dict[str, float] | None = None,
                  max_len: int | None = None, start_s: float | None = None) -> Workload:
    """Build the workload the simulator replays.

    ``spec``: a synthetic name (``chat``, ``code``, ``long-context``) or a trace path, format detected from
    the extension and header or forced with a prefix (``azure:``, ``burstgpt:``, ``mooncake:``,
    ``sharegpt:``). ``arrival``: ``poisson``, ``gamma:<b>``, ``hawkes[:<n>[:<decay>]]`` or ``trace``
    (keep the trace's arrivals, inter-arrival times scaled by one constant to ``rps`` when given, so the
    window ``[0, duration_s)`` holds ``rps·duration_s`` requests). Synthetic arrivals with a trace keep the
    trace's lengths (drawn at random) and need ``rps`` unless the trace has arrival times.
    ``duration_s=None`` with ``trace`` keeps the whole trace. ``tenants``: name -> weight, drawn per
    request. ``max_len``: clip prompt + output to the model length. ``servegen:DIR[@S]``: production traffic
    per client (:mod:`.servegen`) from ``start_s`` (or ``S``; default: the busiest window). Everything random derives from
    ``seed`` (independent streams for arrivals, lengths and tenants, so changing the tenant mix does not
    move arrivals).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise WorkloadError(f"workload: expected a trace path or one of {', '.join(sorted(LENGTHS))}, got {spec!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkloadError(f"seed: expected an integer >= 0, got {seed!r}")
    kind, params = arrival_processes.parse_arrival(arrival)
    if rps is not None and (isinstance(rps, bool) or not isinstance(rps, (int, float)) or not rps > 0):
        raise WorkloadError(f"rps: expected a number > 0, got {rps!r}")
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]

    fmt, path = split_spec(spec.strip())
    if spec.strip().startswith(servegen.PREFIX):
        if kind not in ("poisson", "trace"):
            raise WorkloadError(f"workload {spec!r}: ServeGen traffic brings its own arrivals (each client's fitted "
                                f"process); --arrival {arrival} does not apply")
        if duration_s is None:
            raise WorkloadError("duration: a ServeGen workload needs a duration in seconds")
        directory, at = servegen.split_spec(spec.strip())
        w = servegen.servegen_workload(directory, rps, duration_s, start_s if start_s is not None else at, rngs)
    elif fmt is None and spec.strip() in LENGTHS:
        name = spec.strip()
        if kind == "trace":
            raise WorkloadError(f"workload {name!r} is synthetic: --arrival trace needs a trace file")
        if rps is None:
            raise WorkloadError(f"workload {name!r}: synthetic workloads need --rps")
        if duration_s is None:
            raise WorkloadError("duration: synthetic workloads need a duration in seconds")
        times = arrival_processes.generate(kind, params, rngs[0], rps, duration_s)
        prompt, output = LENGTHS[name].sample(rngs[1], times.size)
        w = Workload(arrival_s=times, prompt_tokens=prompt, output_tokens=output,
                     tenant_ids=np.zeros(times.size, dtype=np.int32), source=f"synthetic:{name}", arrival=arrival,
                     duration_s=float(duration_s), notes=[f"lengths: {LENGTHS[name].source}"])
    else:
        if fmt is None and not os.path.exists(path):
            raise WorkloadError(f"workload {spec!r}: no such file, and not a synthetic workload "
                                f"({', '.join(sorted(LENGTHS))})")
        trace = read_trace(path, fmt, skip_bad=skip_bad)
        w = _trace_workload(trace, kind, params, rps, duration_s, rngs)
        w.arrival = arrival
    w.seed = seed
    if tenants:
        w = assign_tenants(w, tenants, rngs[2])
    if max_len is not None:
        w = clip_lengths(w, max_len)
    return w
