"""The twin's side of ``superinferd bench fidelity``: run the twin on a real run's requests and settings, with
its measured model terms (or some of them switched off), and score it against the real run.

The terms (docs/fidelity.md): the calibrated step (always), ``host_step``, ``host_plan``, ``host_waiting``,
``host_arrival``, ``new_shape`` (with ``shape_history``: not for the shapes the engine's process ran before the
run; with ``shape_capacity``: only the sizes it ran last, as many as its kernel cache keeps), ``host_output``,
``host_wake``, ``host_kv`` (:class:`superinfer.sim.host.HostCosts`; ``host_kv``, the
connector's measured time per park, load and sync, replaces the copy pricing), ``host_resume`` (a resumed
request's cost to the step beyond its load, measured on the plugin's steps: :mod:`superinfer.bench.fidelity.steps`;
left out, below), ``sync_resume`` (a resumed
request computes in the step of its synchronous load: core ``Capacity.sync_loads``; left out, below),
``sync_transfers`` (the CPU connector copies within the step, at the copy micro-benchmark's time per block;
what the twin falls back to without ``host_kv``) and ``host_speed`` (the host's speed at the time of the run, from a probe run just before
and after it, against what the calibrated step and host terms predict for the probe's step: the calibrated
step, the host terms and the copy time are scaled by that ratio) and ``run_speed`` (the same scaling, by the
host's speed measured on the run's own quiet steps: :func:`superinfer.bench.fidelity.steps.run_speed`; not a
prediction, since it reads the run being predicted, but a measure of how much of the error is the host's
speed; left out, reported as a variant).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

#: the twin's model terms that ``--ablate`` can switch off (docs/fidelity.md)
TERMS = ("host_step", "host_plan", "host_waiting", "host_arrival", "new_shape", "shape_history", "shape_capacity",
         "host_output", "host_wake", "host_kv", "host_resume", "sync_resume", "sync_transfers", "host_speed",
         "run_speed")
#: the terms that scale the twin's times by the host's speed during the run (each a factor per run)
SPEED_TERMS = ("host_speed", "run_speed")
PCT_KEYS = ("ttft_p50", "ttft_p90", "tbt_p50", "tbt_p90")
SIDE_KEYS = ("ttft_attainment", "tbt_attainment", "tbt_gap_attainment", "slo_attainment", "throughput_tok_s",
             "rotations", "preemptions", "finished", "arrived")


def _pct_err(real: float, twin: float) -> float:
    if not (math.isfinite(real) and math.isfinite(twin)) or real <= 0:
        return float("nan")
    return 100.0 * abs(twin - real) / real


def request_values(t_arr: np.ndarray, t_first: np.ndarray, outputs: np.ndarray, last_token: np.ndarray,
                   end_s: float) -> dict[str, np.ndarray]:
    """Per request: TTFT (a request without a first token counts until ``end_s``), and the mean TBT of those
    with two tokens or more (seconds)."""
    has_first = ~np.isnan(t_first)
    ttft = np.where(has_first, t_first - t_arr, end_s - t_arr)
    gaps_n = np.maximum(outputs - 1, 0)
    span = np.where(has_first, last_token - t_first, 0.0)
    return {"ttft": ttft, "tbt": (span / np.maximum(gaps_n, 1))[gaps_n > 0]}


def percentiles(values: dict[str, np.ndarray]) -> dict[str, float]:
    """P50/P90/P99 of TTFT and per-request TBT (``ttft_p50_s`` ...; NaN where there is no value)."""
    return {f"{name}_p{q}_s": float(np.percentile(v, q)) if v.size else float("nan")
            for name, v in values.items() for q in (50, 90, 99)}


def quantiles(trace: Any) -> dict[str, Any]:
    """TTFT and per-request mean TBT quantiles, the raw values for CDFs and the per-request values (seconds)."""
    values = request_values(trace.t_arr, trace.t_first, trace.outputs, trace.last_token, trace.sim_s)
    out: dict[str, Any] = percentiles(values)
    out["_cdf"] = {"ttft": np.sort(values["ttft"]), "gaps": np.sort(trace.gaps)}
    out["_values"] = values
    return out


def errors(real: dict[str, Any], twin: dict[str, Any]) -> dict[str, float]:
    """The twin's error against the engine: percent for quantiles, points (x100) for attainments."""
    e = {f"{k}_pct": _pct_err(real[f"{k}_s"], twin[f"{k}_s"]) for k in PCT_KEYS}
    finite = [v for v in e.values() if math.isfinite(v)]
    e["mape_pct"] = float(np.mean(finite)) if finite else float("nan")
    for k in ("ttft", "tbt", "tbt_gap", "slo"):
        e[f"{k}_attainment_pp"] = 100.0 * (twin[f"{k}_attainment"] - real[f"{k}_attainment"])
    return e


def side(metrics: dict[str, Any], q: dict[str, Any]) -> dict[str, Any]:
    """One side of a run (real or twin) as the JSON reports it."""
    out = {k: metrics[k] for k in SIDE_KEYS}
    out.update({k: v for k, v in q.items() if not k.startswith("_")})
    return out


def cost_model(block_size: int, cal: Any = None, overlap: bool = True) -> Any:
    """The twin's cost model: compute and transfers both from the calibration; the model profile only sizes
    a block for the fit's transfer rate (seconds per block), the hardware profile is not used beyond that."""
    from superinfer.sim.build import build_cost_model

    return build_cost_model("llama-3-8b", "gh200", block_size, calibration=cal, overlap=overlap)


def probe_reference(cal: Any, host: Any, context: int) -> float:
    """What the twin's terms say the speed probe's step costs: two decodes at ``context`` tokens each, with
    the policy's per-step host terms (a quiet step: no plan)."""
    return (cal.coefficients.iteration_s(0, 0.0, 2, 2 * context) + host.step_s + host.output_s
            + 2 * host.output_per_seq_s)


def speed_factor(probe_s: list[float], reference_s: float) -> float:
    """The host's speed during a run against the twin's terms: the mean of the probes around the run over
    what the terms predict for the probe's step (1.0 without probes)."""
    if not probe_s or not (reference_s > 0):
        return 1.0
    return float(np.mean(probe_s)) / reference_s


def scaled(cal: Any, host: Any, factor: float) -> tuple[Any, Any]:
    """The calibration (compute and copies) and the host terms, every time in them times ``factor``."""
    from superinfer.sim.calibration import TransferCalibration

    if factor == 1.0:
        return cal, host
    c = cal.coefficients
    coef = replace(c, **{k: getattr(c, k) * factor for k in c.__dataclass_fields__})
    t = cal.transfer
    transfer = TransferCalibration(h2d_gb_s=t.h2d_gb_s / factor if t.h2d_gb_s else t.h2d_gb_s,
                                   d2h_gb_s=t.d2h_gb_s / factor if t.d2h_gb_s else t.d2h_gb_s,
                                   duplex_factor=t.duplex_factor)
    host = replace(host, wake_extra_s=tuple(v * factor for v in host.wake_extra_s),
                   **{k: getattr(host, k) * factor for k in host.__dataclass_fields__
                      if not k.startswith("wake_") and k != "shape_capacity"})
    return replace(cal, coefficients=coef, transfer=transfer), host


def twin_run(trace_arrays: tuple, o: dict[str, Any], policy: str, slo: tuple[float, float], cal: Any,
             host: Any, seed: int, off: tuple[str, ...] = (), speed: dict[str, float] | None = None,
             shapes_before: Any = ()) -> tuple[dict[str, Any], Any]:
    """The twin on the engine's requests and settings; ``off`` names :data:`TERMS` left out; ``speed``: the
    run's factor of each of :data:`SPEED_TERMS` (a term on scales the twin's times by its factor);
    ``shapes_before``: the batch sizes in tokens the engine's process ran before this run, least recently run
    first (``shape_history``; ``shape_capacity`` keeps the last of them)."""
    from superinfer.bench.engine.replay import ROTA_POLICIES
    from superinfer.core import Params, Tenant, TenantTable
    from superinfer.sim.engine import SimConfig, Simulator
    from superinfer.sim.metrics import run_metrics
    from superinfer.sim.workload import Workload

    arr, prompt, output, duration = trace_arrays
    w = Workload.from_arrays(arr, prompt, output, duration_s=duration, source="bench fidelity")
    tenants = TenantTable([Tenant("default", slo[0], slo[1])])
    knobs = {k: o[k] for k in Params.__dataclass_fields__ if o.get(k) is not None}
    params = Params(**knobs)
    zero = {"host_step": ("step_s",), "host_plan": ("plan_s", "plan_per_live_s"), "host_arrival": ("arrival_s",),
            "new_shape": ("new_shape_s",), "host_output": ("output_s", "output_per_seq_s"),
            "host_waiting": ("waiting_s",), "shape_capacity": ("shape_capacity",),
            "host_kv": ("park_call_s", "park_block_s", "load_s", "load_block_s", "sync_call_s", "sync_block_s"),
            "host_resume": ("resume_s",)}
    for term, fields in zero.items():
        if term in off:
            host = replace(host, **{f: 0.0 for f in fields})
    if "host_wake" in off:
        host = replace(host, wake_idle_s=(), wake_extra_s=())
    cal, host = scaled(cal, host, float(np.prod([(speed or {}).get(t, 1.0) for t in SPEED_TERMS if t not in off])))
    cm = cost_model(o["block_size"], cal, overlap="sync_transfers" in off)
    cfg = SimConfig(policy=policy, max_num_seqs=o["max_num_seqs"], max_num_batched_tokens=o["max_num_batched_tokens"],
                    b_xfer=o["b_xfer"], params=params, tenants=tenants, hbm_blocks=o["num_blocks"] - 1,
                    dram_blocks=o["host_blocks"], drain_s=o["drain"], seed=seed, host=host,
                    shapes_run=() if "shape_history" in off else tuple(int(n) for n in shapes_before),
                    sync_loads=policy in ROTA_POLICIES and o.get("load") != "async" and "sync_resume" not in off)
    tr = Simulator(w, cm, cfg).run()
    return run_metrics(tr, tenants, duration), tr


#: terms measured but left out of the twin ("all"): they did not reduce the error (docs/fidelity.md).
#: ``host_speed``: the per-run speed probe raised the mean MAPE from 14.5 to 18.8 % on the reference run of
#: 2026-11-30 (a probe of a few hundred ms does not track the host's speed over a run). ``sync_resume``: with
#: the plugin planning same-step resumes too, the engine's ``lvf-paper`` at 7.5 req/s kept the throughput and
#: token gaps of the one-step-later model (1,341 tok/s, TBT P50 19 ms; the twin with it 1,461 and 8.5 ms,
#: without it 1,338 and 19.3 ms), so neither the plugin nor the twin assumes it. ``host_resume`` (0.3-0.5 ms per
#: resume, with ``host_waiting`` measured on the plugin's steps): mean MAPE 11.9 % with it and 12.6 % without on the
#: run of 2026-12-01 21:00, 23.1 % and 19.1 % on the run of 23:18 (docs/fidelity.md). ``run_speed`` reads the
#: run it predicts (a diagnosis, not a prediction). ``--ablate`` scores each.
LEFT_OUT = ("host_speed", "sync_resume", "host_resume", "run_speed")


def variants(ablate: bool) -> list[tuple[str, tuple[str, ...]]]:
    """The twin variants a run is scored with: every term but :data:`LEFT_OUT` ("all"), then (``ablate``) each
    of those off, each left-out term on, and all off ("none")."""
    out: list[tuple[str, tuple[str, ...]]] = [("all", LEFT_OUT)]
    if ablate:
        out += [(f"no_{t}", (t, *LEFT_OUT)) for t in TERMS if t not in LEFT_OUT]
        out += [(f"with_{t}", tuple(x for x in LEFT_OUT if x != t)) for t in LEFT_OUT] + [("none", TERMS)]
    return out


def score(row: dict[str, Any], requests: tuple, o: dict[str, Any], slo: tuple[float, float], cal: Any, host: Any,
          speed: dict[str, float], ablate: bool) -> Any:
    """Run every twin variant for one real run (``row["real"]``) and fill ``row["twin"]``, ``row["error"]`` and
    ``row["ablation"]``; returns the full twin's CDF arrays."""
    twin_o = o if o.get("calibration") else {**o, "step_slo_share": 0.0}  # the plugin had no fit
    cdf = None
    shapes = row.get("_requests", {}).get("shapes_before", ())
    for name, off in variants(ablate):
        tm, tr = twin_run(requests, twin_o, row["policy"], slo, cal, host, row["seed"], off, speed, shapes)
        tq = quantiles(tr)
        s = side(tm, tq)
        if name == "all":
            row["twin"], row["error"], cdf = s, errors(row["real"], s), tq["_cdf"]
            row["_twin_values"] = tq["_values"]  # for the errors pooled over seeds (fidelity.report)
        else:
            row.setdefault("ablation", {})[name] = {"twin": s, "error": errors(row["real"], s)}
    return cdf
