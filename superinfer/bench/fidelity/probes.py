"""Measuring the twin's terms on engines, for ``superinferd bench fidelity``: the calibration, the host terms (the
step probes of :mod:`superinfer.bench.fidelity.host`, the probe replays that time the plugin's plans, connector and
resumes, the kernel cache's capacity), their JSON form, and ``--rescore --remeasure``."""

from __future__ import annotations

import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from superinfer.bench.engine.run import _requests, run_policy

#: the seed of the probe replay that times the plugin's plans (no compared run uses it)
PLAN_PROBE_SEED = 1000


def calibration(o: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The twin's calibration: ``--twin-calibration`` if given, else measured now (as ``superinferd calibrate``)."""
    from superinfer.bench.engine.calibrate import fit_mape, measure, robust_fit
    from superinfer.sim import calibration as calib

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


def _stock_spec(o: dict[str, Any], **extra: Any) -> Any:
    """An :class:`~superinfer.bench.engine.replay.EngineSpec` of stock vLLM with the run's engine settings (``extra``
    overrides or adds fields)."""
    from superinfer.bench.engine.replay import EngineSpec

    return EngineSpec(model=o["model"], policy="vllm", block_size=o["block_size"], max_model_len=o["max_model_len"],
                      max_num_seqs=o["max_num_seqs"], max_num_batched_tokens=o["max_num_batched_tokens"], **extra)


def _median_prompt(o: dict[str, Any], rate: float) -> int:
    """The median prompt length (tokens) of the run's requests at ``rate``, seed 0 (what the host probes use)."""
    _, _, prompt, _, _ = _requests(o["workload"], o["arrival"], rate, o["duration"], 0, o["max_model_len"])
    return int(np.median(prompt))


def _probe_replays(o: dict[str, Any], host: dict[str, dict[str, Any]], rates: list[float], slo: tuple[float, float],
                   coefficients: Any, workdir: Path,
                   terms: tuple[str, ...] = ("host_plan", "host_kv", "host_resume", "host_waiting")) -> None:
    """For each of the plugin's policies in ``host``, probe replays of the workload on a seed no compared run
    uses: at the highest rate, the plan line (``host_plan``) and the KV connector's lines (``host_kv``) from the
    plugin's timings, then ``host_resume`` from its steps priced with those; at the middle rate (where steps with
    and without a queue are both common) ``host_waiting`` from its steps (:mod:`superinfer.bench.fidelity.steps`;
    the stock probe's value stays where no cell had enough steps). Only ``terms`` are replaced in ``host``."""
    from superinfer.bench.engine.replay import ROTA_POLICIES
    from superinfer.bench.fidelity.host import kv_lines, plan_line
    from superinfer.bench.fidelity.steps import resume_line, waiting_line

    duration = min(float(o["duration"]), 10.0)
    middle = sorted(rates)[(len(rates) - 1) // 2]
    for policy in [p for p in host if p in ROTA_POLICIES]:
        h = host[policy]["host"]
        log = None
        if {"host_plan", "host_kv", "host_resume"} & set(terms):
            click.echo(f"{policy}: probe replay for the plan's, the connector's and a resume's cost ...", err=True)
            counters, log = _probe_replay(o, policy, max(rates), duration, slo, workdir)
            probe = {"seed": PLAN_PROBE_SEED, "rps": max(rates), "duration_s": duration}
            if "host_plan" in terms:
                sums = counters.get("plan_sums", {})
                a, b = plan_line(sums)
                h = replace(h, plan_s=a, plan_per_live_s=b)
                host[policy]["plan_probe"] = {**probe, **sums}
            if "host_kv" in terms:
                kv = counters.get("kv_sums", {})
                h = replace(h, **kv_lines(kv))
                host[policy]["kv_probe"] = kv
            if "host_resume" in terms:
                line = resume_line(log, coefficients, h)
                h = replace(h, resume_s=line.pop("resume_s"))
                host[policy]["resume_probe"] = {**probe, **line}
        if "host_waiting" in terms:
            if log is None or middle != max(rates):
                click.echo(f"{policy}: probe replay at {middle:g} req/s for the waiting queue's cost ...", err=True)
                _, log = _probe_replay(o, policy, middle, duration, slo, workdir)
            stock = host[policy].get("waiting_probe", {}).get("stock_probe_s", h.waiting_s)  # a re-measure keeps it
            line = waiting_line(log, coefficients, h)
            host[policy]["waiting_probe"] = {"seed": PLAN_PROBE_SEED, "rps": middle, "duration_s": duration,
                                             "stock_probe_s": stock, **line}
            h = replace(h, waiting_s=stock if line["waiting_s"] is None else line["waiting_s"])
        host[policy]["host"] = h


def _probe_replay(o: dict[str, Any], policy: str, rps: float, duration: float, slo: tuple[float, float],
                  workdir: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One probe replay of ``policy`` at ``rps``: the engine's counters and the plugin's step log (columns)."""
    logs: dict[tuple[str, int], Any] = {}
    out = run_policy(policy, PLAN_PROBE_SEED, {**o, "rps": rps, "duration": duration}, slo, workdir, step_logs=logs)
    return out["engine_counters"], logs[(policy, PLAN_PROBE_SEED)].array()


def host_terms(o: dict[str, Any], policies: list[str], rates: list[float], slo: tuple[float, float],
               coefficients: Any, workdir: Path) -> dict[str, dict[str, Any]]:
    """The host terms per policy (:mod:`superinfer.bench.fidelity.host`): the step probes, and for the plugin's
    policies the probe replays (:func:`_probe_replays`)."""
    from superinfer.bench.fidelity.host import measure_host_costs

    spec = _stock_spec(o, params={"ttft_slo": slo[0], "tbt_slo": slo[1], "b_xfer": o["b_xfer"]},
                       host_blocks=o["host_blocks"], load=o.get("load"))
    host = measure_host_costs(spec, policies, _median_prompt(o, rates[0]), workdir)
    _probe_replays(o, host, rates, slo, coefficients, workdir)
    return host


def measure_shape_capacity(o: dict[str, Any], host: dict[str, dict[str, Any]], workdir: Path) -> None:
    """``shape_capacity`` (:func:`superinfer.bench.fidelity.shapes.shape_capacity`) on a stock engine of these
    settings, into every policy's host terms (and its probe as ``shape_probe``). Run after the engine runs: the
    probe runs a few hundred new batch sizes, and the runs should not start from a kernel cache it filled (on
    the run of 2026-12-01 11:00, with the probe first, the engine was 2.0 ms slower than the twin on the steps
    the twin priced as cold; not shown to be the probe's doing, docs/fidelity.md)."""
    from superinfer.bench.engine.replay import open_engine
    from superinfer.bench.fidelity.shapes import shape_capacity

    spec = _stock_spec(o, num_blocks=128)
    click.echo("measuring the kernel cache's capacity (shape_capacity) ...", err=True)
    with open_engine(spec, workdir) as llm:
        probe = shape_capacity(llm, o["max_model_len"] - 2, o["max_num_batched_tokens"])
    for h in host.values():
        h["host"] = replace(h["host"], shape_capacity=probe["shape_capacity"])
        h["shape_probe"] = probe


def host_json(host: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {p: {**asdict(h["host"]), **{k: v for k, v in h.items() if k != "host"}} for p, h in host.items()}


def host_from_json(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from superinfer.sim.engine import HostCosts

    fields = HostCosts.__dataclass_fields__
    return {p: {"host": HostCosts(**{k: v for k, v in h.items() if k in fields}),
                **{k: v for k, v in h.items() if k not in fields}} for p, h in d.items()}


def remeasure_terms(o: dict[str, Any], host: dict[str, dict[str, Any]], names: str, slo: tuple[float, float],
                    coefficients: Any) -> dict[str, Any]:
    """Measure the host terms ``names`` now, with the recorded settings, and put them in the policies'
    :class:`HostCosts` of ``host``: those of :data:`superinfer.bench.fidelity.wake.REMEASURABLE` on a stock engine
    (every policy alike), ``host_resume`` and ``host_waiting`` by probe replays of each plugin policy
    (:func:`_probe_replays`, the plan and connector lines as recorded). Returns the new values and the recorded
    ones they replace (``--rescore --remeasure``)."""
    from superinfer.bench.fidelity.wake import REMEASURABLE, remeasure

    terms = tuple(t.strip() for t in names.split(",") if t.strip())
    replayed = ("host_resume", "host_waiting")  # measured by probe replays of the plugin's policies
    known = (*REMEASURABLE, *replayed)
    unknown = [t for t in terms if t not in known]
    if not terms or unknown:
        raise click.BadParameter(f"{names!r}: terms are {', '.join(known)}", param_hint="--remeasure")
    rates = [float(x) for x in str(o.get("rates") or o["rps"]).split(",")]
    click.echo(f"measuring {', '.join(terms)} now ...", err=True)
    stock_terms = tuple(t for t in terms if t not in replayed)
    values: dict[str, Any] = {}
    recorded: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if stock_terms:
            values = remeasure(_stock_spec(o), _median_prompt(o, rates[0]), stock_terms, Path(tmp))
            first = next(iter(host.values()))["host"]
            recorded = {k: getattr(first, k) for k in values}
            for h in host.values():
                h["host"] = replace(h["host"], **values)
        fields = {"host_resume": "resume_s", "host_waiting": "waiting_s"}
        again = tuple(t for t in replayed if t in terms)
        if again:
            before = {fields[t]: {p: getattr(h["host"], fields[t]) for p, h in host.items()} for t in again}
            _probe_replays(o, host, rates, slo, coefficients, Path(tmp), terms=again)
            for t in again:
                values[fields[t]] = {p: getattr(h["host"], fields[t]) for p, h in host.items()}
                recorded[fields[t]] = before[fields[t]]
    return {"terms": list(terms), "values": values, "recorded": recorded}
