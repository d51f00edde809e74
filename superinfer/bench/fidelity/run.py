"""``superinferd bench fidelity``: the real engine and its digital twin on the same requests.

For each policy, rate and seed the real vLLM engine replays the requests (as ``bench vllm``), with a speed
probe just before and after it; then the twin (:class:`superinfer.sim.engine.Simulator`) replays the *same*
requests with matched KV blocks, block size, batch limits, ``B_xfer``, SLOs and live params, priced by the
engine's calibration fit (``--twin-calibration``, else measured first as ``superinferd calibrate`` does)
plus the host terms measured on this engine (:mod:`superinfer.bench.fidelity.host`). It reports both sides
and the twin's error: percent error of the TTFT and per-request-TBT P50/P90 (``mape_pct`` is their mean)
and points of attainment. ``--ablate`` also scores twin variants with each model term off
(:mod:`superinfer.bench.fidelity.twin`), on the same real runs; ``--rescore FILE`` runs no engine and scores
the twin as it is now against the real runs an earlier JSON recorded (docs/fidelity.md).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.bench.engine.run import _requests, engine_options, prepare, run_policy
from superinfer.bench.fidelity.probes import (calibration, host_from_json, host_json, host_terms,
                                              measure_shape_capacity, remeasure_terms)
from superinfer.bench.fidelity.steps import quiet_cells
from superinfer.bench.fidelity.store import REQUEST_FIELDS, STEPS, cdf_path, load_rescore, run_speeds, save_real
from superinfer.bench.fidelity.twin import (TERMS, cost_model, probe_reference, quantiles, score, side, speed_factor,
                                            variants)


def _twin_calibration(coefficients: dict[str, float], block_size: int, copy_s: float, model: str) -> Any:
    """The twin's calibration: the step fit, and transfers at the measured copy time per block."""
    from superinfer.sim.calibration import Calibration, Coefficients, TransferCalibration

    cal = Calibration(engine="vllm", model=model, hardware="this host", date="",
                      coefficients=Coefficients(**coefficients), block_size=block_size)
    gbps = cost_model(block_size).block_bytes / copy_s / 1e9  # the fit's rate on the twin's block size
    cal.transfer = TransferCalibration(h2d_gb_s=gbps, d2h_gb_s=gbps, duplex_factor=1.0)
    return cal


def _engine_runs(o: dict[str, Any], rates: list[float], policies: list[str], slo: tuple[float, float],
                 host: dict[str, dict[str, Any]], workdir: Path) -> list[dict[str, Any]]:
    """Every real run, each with the speed probes around it; the rows carry the real side and its CDFs."""
    from superinfer.bench.engine.replay import SHAPES_RUN
    from superinfer.bench.fidelity.host import probe_fits, quiet_step_s

    probe = quiet_step_s if probe_fits(o["num_blocks"], o["block_size"], o["max_model_len"]) else None
    rows: dict[tuple[str, float, int], dict[str, Any]] = {}
    for rps in rates:
        ro = {**o, "rps": rps}
        for seed in range(o["seeds"]):
            for rep in range(o.get("repeat", 1)):  # repeats interleaved: the host's drift falls on each alike
                for k in range(len(policies)):
                    policy = policies[(k + seed + rep) % len(policies)]
                    click.echo(f"rps {rps:g} seed {seed} {policy}: real engine"
                               + (f" (repeat {rep})" if rep else "") + " ...", err=True)
                    traces: dict[tuple[str, int], Any] = {}
                    shapes = np.fromiter(SHAPES_RUN, np.int64, len(SHAPES_RUN))  # what this process ran before
                    logs: dict[tuple[str, int], Any] = {}
                    real_m = run_policy(policy, seed, ro, slo, workdir, traces=traces, probe=probe, step_logs=logs)
                    tr = traces[(policy, seed)]
                    q = quantiles(tr)
                    cells = quiet_cells(logs[(policy, seed)].array())
                    kept = {**{k: getattr(tr, k) for k in REQUEST_FIELDS},
                            **{f"{STEPS}{k}": v for k, v in cells.items()}}
                    if rep:  # the engine against itself on the same requests: the noise floor
                        row = rows[(policy, rps, seed)]
                        row.setdefault("real_repeats", []).append(side(real_m, q))
                        row["_requests"].update({f"rep{rep}.{k}": v for k, v in kept.items()})
                        continue
                    rows[(policy, rps, seed)] = {
                        "policy": policy, "rps": rps, "seed": seed, "real": side(real_m, q),
                        "probe_s": real_m.get("probe_s", []), "_cdf": q["_cdf"],
                        "_requests": {**kept, "shapes_before": shapes}}
    return list(rows.values())


def _score_all(rows: list[dict[str, Any]], o: dict[str, Any], slo: tuple[float, float], cal: Any,
               host: dict[str, dict[str, Any]]) -> dict[tuple[str, float], Any]:
    """The twin (every variant) on each real run's requests, at the host's speed of the run (its probes
    against the terms' prediction of the probe's step); CDFs of seed 0, real and twin, per point."""
    from superinfer.bench.fidelity.host import PROBE_CONTEXT

    cdfs = {}
    for row in rows:
        terms = host[row["policy"]]["host"]
        row["speed"] = speed_factor(row["probe_s"], probe_reference(cal, terms, PROBE_CONTEXT))
        row.update(run_speeds(row.get("_requests", {}), cal.coefficients, terms, len(row.get("real_repeats", []))))
        ro = {**o, "rps": row["rps"]}
        _, arr, prompt, output, _ = _requests(o["workload"], o["arrival"], row["rps"], o["duration"], row["seed"],
                                              o["max_model_len"])
        twin_cdf = score(row, (arr, prompt, output, o["duration"]), ro, slo, cal, terms,
                         {"host_speed": row["speed"], "run_speed": row.get("run_speed") or 1.0}, o["ablate"])
        real_cdf = row.pop("_cdf", None)
        if row["seed"] == 0 and real_cdf is not None:
            cdfs[(row["policy"], row["rps"])] = (real_cdf, twin_cdf)
    return cdfs


@click.command("fidelity")
@engine_options
@click.option("--twin-calibration", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The twin's step-time fit (superinferd calibrate on this engine); default: measure one first.")
@click.option("--rates", default=None, help="Comma-separated arrival rates (req/s), each a load level (default: --rps).")
@click.option("--ablate/--no-ablate", default=True, show_default=True,
              help="Also run the twin with each model term off, and with all off (the uncorrected twin).")
@click.option("--rescore", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Run no engine: score the twin (as it is now) against the real runs of this earlier JSON "
                   "(its settings, SLOs, calibration and host terms; CDFs from its .cdf.npz).")
@click.option("--remeasure", default=None,
              help="With --rescore: measure these host terms on this host now (comma-separated: host_arrival, "
                   "host_wake, shape_capacity, host_resume, host_waiting) in place of the recorded ones; needs the "
                   "JSON's model.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 10),
              help="Run the engine this many times on each point's requests (interleaved); the summary's "
                   "noise_floor is the engine's error against itself (its first run against each repeat).")
@click.option("--plot-dir", default=None, type=click.Path(file_okay=False), help="Write CDF plots (PNG) here.")
@click.option("--json", "json_path", default=None, help="Write the JSON here ('-' for stdout).")
def bench_fidelity(**o: Any) -> None:
    """The real engine and its calibrated twin on the same requests: percentiles, attainments, the error."""
    from superinfer.bench.fidelity.host import copy_s_per_block
    from superinfer.bench.fidelity.report import echo_table, plot_cdfs, summarise_fidelity

    remeasured = None
    if o["rescore"]:
        old, run_o, rows = load_rescore(o["rescore"], o["ablate"])
        slo_info, cal_info, copy_s, command = old["slo"], old["calibration"], old["copy_s_per_block"], old["command"]
        slo = (slo_info["ttft_slo_s"], slo_info["tbt_slo_s"])
        host = host_from_json(old["host_terms"])
        if o["remeasure"]:
            from superinfer.sim.calibration import Coefficients

            remeasured = remeasure_terms(run_o, host, o["remeasure"], slo, Coefficients(**cal_info["coefficients"]))
    else:
        if o["remeasure"]:
            raise click.BadParameter("only with --rescore (a run measures every term)", param_hint="--remeasure")
        rates = [float(x) for x in str(o["rates"]).split(",")] if o["rates"] else [float(o["rps"])]
        if any(not (r > 0) for r in rates):
            raise click.BadParameter("rates must be > 0", param_hint="--rates")
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            policies, slo, measured = prepare(o, workdir)
            cal, cal_info = calibration(o)
            click.echo("measuring host terms (scheduler, plans, arrivals, KV copies, resumes) ...", err=True)
            host = host_terms(o, policies, rates, slo, cal.coefficients, workdir)
            copy_s = copy_s_per_block(o["model"], o["block_size"])
            rows = _engine_runs(o, rates, policies, slo, host, workdir)
            measure_shape_capacity(o, host, workdir)
        run_o, slo_info = o, {"ttft_slo_s": slo[0], "tbt_slo_s": slo[1], "measured": measured}
        command = "superinferd bench fidelity " + " ".join(sys.argv[3:])
    cal = _twin_calibration(cal_info["coefficients"], run_o["block_size"], copy_s, Path(run_o["model"]).name)
    cdfs = _score_all(rows, run_o, slo, cal, host)
    requests = {(r["policy"], r["rps"], r["seed"]): r.pop("_requests") for r in rows if "_requests" in r}
    twin_values = {(r["policy"], r["rps"], r["seed"]): r.pop("_twin_values") for r in rows if "_twin_values" in r}
    result = {
        "command": command,
        **({"rescored_with": "superinferd bench fidelity " + " ".join(sys.argv[3:])} if o["rescore"] else {}),
        "config": {k: v for k, v in run_o.items() if k not in ("json_path", "rescore", "remeasure")},
        **({"remeasured": remeasured} if remeasured else {}),
        "slo": slo_info,
        "calibration": cal_info,
        "host_terms": host_json(host),
        "copy_s_per_block": copy_s,
        "terms": list(TERMS),
        "runs": rows,
        "summary": summarise_fidelity(rows, [v for v, _ in variants(run_o["ablate"])], requests, twin_values),
    }
    text = json.dumps(result, indent=1, default=float)
    if o["json_path"] == "-":
        click.echo(text)
    elif o["json_path"]:
        Path(str(o["json_path"])).write_text(text + "\n")
        if cdfs:
            save_real(cdf_path(str(o["json_path"])), cdfs, requests)
    if o["plot_dir"]:
        plot_cdfs(cdfs, Path(o["plot_dir"]))
    if o["json_path"] != "-":
        echo_table(result)
