"""``superinferd bench fidelity``: the real engine and its digital twin on the same requests.

For each policy, rate and seed the real vLLM engine replays the requests (as ``bench vllm``), then the twin
(:class:`superinfer.sim.engine.Simulator`) replays the *same* requests with matched KV blocks, block size,
batch limits, ``B_xfer``, SLOs and live params, priced by the engine's calibration fit (``--calibration``,
else measured first by ``superinferd calibrate``) plus the host terms measured on this engine
(:mod:`superinfer.vllm.fidelity_host`). It reports both sides and the twin's error: percent error of the
TTFT and per-request-TBT P50/P90 (``mape_pct`` is their mean) and points of attainment. The twin variants
in ``--ablate`` switch model terms off one at a time, on the same real runs (docs/fidelity.md).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.vllm.bench import _requests, engine_options, prepare, run_policy

#: the twin's model terms that ``--ablate`` can switch off (docs/fidelity.md)
TERMS = ("host_step", "host_plan", "host_arrival", "new_shape", "sync_transfers")
PCT_KEYS = ("ttft_p50", "ttft_p90", "tbt_p50", "tbt_p90")


def _pct_err(real: float, twin: float) -> float:
    if not (math.isfinite(real) and math.isfinite(twin)) or real <= 0:
        return float("nan")
    return 100.0 * abs(twin - real) / real


def quantiles(trace: Any) -> dict[str, Any]:
    """TTFT and per-request mean TBT quantiles, and the raw values for CDFs (seconds)."""
    has_first = ~np.isnan(trace.t_first)
    ttft = np.where(has_first, trace.t_first - trace.t_arr, trace.sim_s - trace.t_arr)
    gaps_n = np.maximum(trace.outputs - 1, 0)
    span = np.where(has_first, trace.last_token - trace.t_first, 0.0)
    tbt = (span / np.maximum(gaps_n, 1))[gaps_n > 0]
    out: dict[str, Any] = {}
    for name, v in (("ttft", ttft), ("tbt", tbt)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_s"] = float(np.percentile(v, q)) if v.size else float("nan")
    out["_cdf"] = {"ttft": np.sort(ttft), "gaps": np.sort(trace.gaps)}
    return out


def errors(real: dict[str, Any], twin: dict[str, Any]) -> dict[str, float]:
    """The twin's error against the engine: percent for quantiles, points (x100) for attainments."""
    e = {f"{k}_pct": _pct_err(real[f"{k}_s"], twin[f"{k}_s"]) for k in PCT_KEYS}
    finite = [v for v in e.values() if math.isfinite(v)]
    e["mape_pct"] = float(np.mean(finite)) if finite else float("nan")
    for k in ("ttft", "tbt", "tbt_gap", "slo"):
        e[f"{k}_attainment_pp"] = 100.0 * (twin[f"{k}_attainment"] - real[f"{k}_attainment"])
    return e


def _cost_model(block_size: int, cal: Any = None, overlap: bool = True) -> Any:
    """The twin's cost model: compute and transfers both from the calibration; the model profile only sizes
    a block for the fit's transfer rate (seconds per block), the hardware profile is not used beyond that."""
    from superinfer.sim.costmodel import CostModel
    from superinfer.sim.hardware import get_hardware
    from superinfer.sim.models import get_model

    return CostModel(get_model("llama-3-8b"), get_hardware("gh200"), block_size, cal, overlap=overlap, duplex=overlap)


def twin_run(trace_arrays: tuple, o: dict[str, Any], policy: str, slo: tuple[float, float], cal: Any,
             host: Any, seed: int, off: tuple[str, ...] = ()) -> tuple[dict[str, Any], Any]:
    """The twin on the engine's requests and settings; ``off`` names :data:`TERMS` left out."""
    from superinfer.core import Params, Tenant, TenantTable
    from superinfer.sim.engine import SimConfig, Simulator
    from superinfer.sim.metrics import run_metrics
    from superinfer.sim.workload import Workload

    arr, prompt, output, duration = trace_arrays
    w = Workload.from_arrays(arr, prompt, output, duration_s=duration, source="bench fidelity")
    tenants = TenantTable([Tenant("default", slo[0], slo[1])])
    knobs = {k: o[k] for k in Params.__dataclass_fields__ if o.get(k) is not None}
    params = Params(**knobs)
    if "host_step" in off:
        host = replace(host, step_s=0.0)
    if "host_plan" in off:
        host = replace(host, plan_s=0.0)
    if "host_arrival" in off:
        host = replace(host, arrival_s=0.0)
    if "new_shape" in off:
        host = replace(host, new_shape_s=0.0)
    overlap = "sync_transfers" in off
    cm = _cost_model(o["block_size"], cal, overlap)
    cfg = SimConfig(policy=policy, max_num_seqs=o["max_num_seqs"], max_num_batched_tokens=o["max_num_batched_tokens"],
                    b_xfer=o["b_xfer"], params=params, tenants=tenants, hbm_blocks=o["num_blocks"] - 1,
                    dram_blocks=o["host_blocks"], drain_s=o["drain"], seed=seed, host=host)
    tr = Simulator(w, cm, cfg).run()
    return run_metrics(tr, tenants, duration), tr


def _calibration(o: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The twin's calibration: ``--twin-calibration`` if given, else measured now (as ``superinferd calibrate``)."""
    from superinfer.sim import calibration as calib
    from superinfer.vllm.calibrate import fit_mape, measure, robust_fit

    if o.get("twin_calibration"):
        cal = calib.load(o["twin_calibration"])
        return cal, {"source": o["twin_calibration"], "coefficients": cal.to_json_dict()["coefficients"]}
    samples = measure(o["model"], block_size=o["block_size"], max_model_len=o["max_model_len"], repeats=2)
    coef, dropped = robust_fit(samples)
    cal = calib.Calibration(engine="vllm", model=Path(o["model"]).name, hardware="this host", date="",
                            coefficients=coef, block_size=o["block_size"])
    return cal, {"source": "measured (repeats 2)", "coefficients": cal.to_json_dict()["coefficients"],
                 "samples": len(samples), "dropped_outliers": dropped,
                 "fit_mape_pct": 100 * fit_mape(coef, samples)}


def _side(metrics: dict[str, Any], q: dict[str, Any]) -> dict[str, Any]:
    keys = ("ttft_attainment", "tbt_attainment", "tbt_gap_attainment", "slo_attainment", "throughput_tok_s",
            "rotations", "preemptions", "finished", "arrived")
    out = {k: metrics[k] for k in keys}
    out.update({k: v for k, v in q.items() if not k.startswith("_")})
    return out


@click.command("fidelity")
@engine_options
@click.option("--twin-calibration", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The twin's step-time fit (superinferd calibrate on this engine); default: measure one first.")
@click.option("--rates", default=None, help="Comma-separated arrival rates (req/s), each a load level (default: --rps).")
@click.option("--ablate/--no-ablate", default=True, show_default=True,
              help="Also run the twin with each model term off, and with all off (the uncorrected twin).")
@click.option("--plot-dir", default=None, type=click.Path(file_okay=False), help="Write CDF plots (PNG) here.")
@click.option("--json", "json_path", default=None, help="Write the JSON here ('-' for stdout).")
def bench_fidelity(**o: Any) -> None:
    """The real engine and its calibrated twin on the same requests: percentiles, attainments, the error."""
    from superinfer.sim.calibration import TransferCalibration
    from superinfer.vllm.fidelity_host import copy_s_per_block, measure_host_costs
    from superinfer.vllm.fidelity_report import echo_table, plot_cdfs, summarise_fidelity
    from superinfer.vllm.replay import EngineSpec

    rates = [float(x) for x in str(o["rates"]).split(",")] if o["rates"] else [float(o["rps"])]
    if any(not (r > 0) for r in rates):
        raise click.BadParameter("rates must be > 0", param_hint="--rates")
    runs: list[dict[str, Any]] = []
    cdfs: dict[tuple[str, float], Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        policies, slo, measured = prepare(o, workdir)
        cal, cal_info = _calibration(o)
        params = {"ttft_slo": slo[0], "tbt_slo": slo[1], "b_xfer": o["b_xfer"]}
        spec = EngineSpec(model=o["model"], policy="vllm", block_size=o["block_size"], max_model_len=o["max_model_len"],
                          max_num_seqs=o["max_num_seqs"], max_num_batched_tokens=o["max_num_batched_tokens"],
                          params=params, host_blocks=o["host_blocks"], load=o.get("load"))
        _, _, prompt, _, _ = _requests(o["workload"], o["arrival"], rates[0], o["duration"], 0, o["max_model_len"])
        click.echo("measuring host terms (scheduler, connector, arrivals, KV copies) ...", err=True)
        host = measure_host_costs(spec, policies, int(np.median(prompt)), workdir)
        copy_s = copy_s_per_block(o["model"], o["block_size"])
        block_bytes = _cost_model(o["block_size"]).block_bytes
        gbps = block_bytes / copy_s / 1e9  # the fit's rate on the twin's block size: copy_s per block
        cal.transfer = TransferCalibration(h2d_gb_s=gbps, d2h_gb_s=gbps, duplex_factor=1.0)
        variants = [("all", ())] + ([(f"no_{t}", (t,)) for t in TERMS] + [("none", TERMS)] if o["ablate"] else [])
        for rps in rates:
            ro = {**o, "rps": rps}
            for seed in range(o["seeds"]):
                _, arr, prompt, output, _ = _requests(o["workload"], o["arrival"], rps, o["duration"], seed,
                                                      o["max_model_len"])
                for k in range(len(policies)):
                    policy = policies[(k + seed) % len(policies)]
                    click.echo(f"rps {rps:g} seed {seed} {policy}: real engine ...", err=True)
                    traces: dict[tuple[str, int], Any] = {}
                    real_m = run_policy(policy, seed, ro, slo, workdir, traces=traces)
                    real_q = quantiles(traces[(policy, seed)])
                    real = _side(real_m, real_q)
                    twin_o = ro if ro.get("calibration") else {**ro, "step_slo_share": 0.0}  # the plugin had no fit
                    row: dict[str, Any] = {"policy": policy, "rps": rps, "seed": seed, "real": real}
                    for name, off in variants:
                        tm, tr = twin_run((arr, prompt, output, o["duration"]), twin_o, policy, slo, cal,
                                          host[policy]["host"], seed, off)
                        tq = quantiles(tr)
                        side = _side(tm, tq)
                        if name == "all":
                            row["twin"], row["error"] = side, errors(real, side)
                            if seed == 0:
                                cdfs[(policy, rps)] = (real_q["_cdf"], tq["_cdf"])
                        else:
                            row.setdefault("ablation", {})[name] = {"twin": side, "error": errors(real, side)}
                    runs.append(row)
    result = {
        "command": "superinferd bench fidelity " + " ".join(sys.argv[3:]),
        "config": {k: v for k, v in o.items() if k != "json_path"},
        "slo": {"ttft_slo_s": slo[0], "tbt_slo_s": slo[1], "measured": measured},
        "calibration": cal_info,
        "host_terms": {p: {"step_s": h["host"].step_s, "plan_s": h["host"].plan_s, "arrival_s": h["host"].arrival_s,
                           "new_shape_s": h["host"].new_shape_s,
                           "median_step_s": h["median_step_s"]} for p, h in host.items()},
        "copy_s_per_block": copy_s,
        "runs": runs,
        "summary": summarise_fidelity(runs, [v for v, _ in variants]),
    }
    text = json.dumps(result, indent=1, default=float)
    if o["json_path"] == "-":
        click.echo(text)
    elif o["json_path"]:
        Path(str(o["json_path"])).write_text(text + "\n")
    if o["plot_dir"]:
        plot_cdfs(cdfs, Path(o["plot_dir"]))
    if o["json_path"] != "-":
        echo_table(result)

