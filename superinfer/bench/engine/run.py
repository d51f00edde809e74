"""``superinferd bench vllm``: replay a workload against a real vLLM engine, per policy, with CIs.

Policies: ``vllm`` (stock V1: FCFS, recompute preemption), ``vllm-priority`` (``--scheduling-policy
priority``; every request has priority 0 unless tenants say otherwise, so it orders by arrival) and ``lvf``
(RotaScheduler + DuplexKVConnector). The workload comes from :func:`superinfer.sim.workload.load_workload`
(same ``--workload/--arrival/--rps/--duration`` as ``bench sim``), lengths clipped to the engine's
``--max-model-len``; prompts are synthetic token ids of the given lengths. Metrics are
:func:`superinfer.sim.metrics.run_metrics` on the replay's token times (wall clock), summarised over
seeds with bootstrap 95 % intervals (:func:`superinfer.sim.metrics.summarise`), so the JSON has the fields
of ``bench sim``. SLOs are explicit (``--ttft-slo/--tbt-slo``) or ``--slo-scale K`` times the engine's
unloaded TTFT and mean TBT of a median request, measured first. ``--save-trace`` writes the replayed
requests (seed 0) as a Mooncake trace for the simulator twin.

``--capacity-share 0.8,1.2`` (instead of ``--rps``) sets each load as a share of the engine's capacity,
measured at the start of the same run: K = ``--capacity-requests`` requests of the workload (seed 0) all
arriving at t = 0 on the stock engine with the runs' sizes; capacity = K / the time until the last one
finishes, in requests/s, on the second of two such bursts (JSON ``capacity``; again after the runs:
``capacity_end``). Per seed and load every policy replays the same requests, and ``paired`` holds the
per-seed differences of each ``--pairs`` pair with Student-t 95 % intervals
(:mod:`superinfer.bench.engine.paired`).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import click
import numpy as np
from click.core import ParameterSource

from superinfer.bench.engine.hostload import HostLoad, rt_throttle
from superinfer.bench.engine.paired import (end_capacity, paired_results, parse_pairs, parse_shares,
                                            run_interleaved, start_capacity)
from superinfer.bench.engine.text import echo_summary
from superinfer.bench.output import keep_runs, write_result
from superinfer.daemon.backends.tiny import tiny_shape_option
from superinfer.core import PARAM_BOUNDS
from superinfer.sim.options import knob_options, start_s_option, with_start

#: RotaScheduler's sums of its plans' wall time against the live requests
#: (``superinfer.vllm.stats.add_plan_time``)
PLAN_SUMS = ("plan_timed", "plan_ns", "plan_live", "plan_live_sq", "plan_ns_x_live")


def counters_mean(runs: list[dict[str, Any]], policies: list[str]) -> dict[str, dict[str, float]]:
    """Per policy, the mean of each numeric engine counter over its runs; a dict-valued counter (e.g. per
    reason) is averaged per key as ``name.key``; other values (None, text) are left out."""
    out: dict[str, dict[str, float]] = {}
    for p in policies:
        values: dict[str, list[float]] = {}
        for run in (r for r in runs if r["policy"] == p):
            for k, v in run.get("engine_counters", {}).items():
                items = v.items() if isinstance(v, dict) else [(None, v)]
                for sub, x in items:
                    if isinstance(x, (int, float)) and not isinstance(x, bool):
                        values.setdefault(k if sub is None else f"{k}.{sub}", []).append(float(x))
        out[p] = {k: float(np.mean(v)) for k, v in values.items()}
    return out


def _requests(workload: str, arrival: str, rps: float, duration: float, seed: int, max_len: int):
    from superinfer.sim.workload import load_workload

    w = load_workload(workload, arrival=arrival, rps=rps, duration_s=duration, seed=seed, max_len=max_len)
    prompt = np.clip(w.prompt_tokens.astype(np.int64), 1, max_len - 2)
    output = np.clip(w.output_tokens.astype(np.int64), 1, None)
    output = np.minimum(output, max_len - 1 - prompt)
    prompts = [[(7 * i + j) % 400 + 3 for j in range(int(p))] for i, p in enumerate(prompt)]
    return w, np.asarray(w.arrival_s, float), prompt, output, prompts


def _unloaded(spec_kwargs: dict[str, Any], prompt_len: int, output_len: int, workdir: Path) -> tuple[float, float]:
    """TTFT and mean TBT of one request alone on the stock engine: medians of 3 runs after a warm-up."""
    from superinfer.bench.engine.replay import EngineSpec, open_engine, replay

    ttfts, tbts = [], []
    with open_engine(EngineSpec(policy="vllm", **spec_kwargs), workdir) as llm:
        p = [[(3 * j) % 400 + 3 for j in range(prompt_len)]]
        replay(llm, np.zeros(1), p, np.array([output_len]), 1.0, 120.0)  # warm-up
        for _ in range(3):
            r = replay(llm, np.zeros(1), p, np.array([output_len]), 1.0, 120.0)
            ttfts.append(float(r.t_first[0] - r.t_arr[0]))
            tbts.append(float(np.mean(r.gaps)) if r.gaps else ttfts[-1])
    return float(np.median(ttfts)), float(np.median(tbts))


def instrument_stock(sched: Any) -> dict[str, int]:
    """Count resumes and recomputed tokens on a stock vLLM scheduler instance (its class is unchanged).

    ``recomputed_tokens``: for each resumed request, the tokens whose KV existed when it was preempted
    and that are computed again (what a prefix-cache hit restores is not counted), as RotaScheduler counts.
    """
    stats = {"resumed": 0, "recomputed_tokens": 0}
    before: dict[str, int] = {}
    preempt, schedule = sched._preempt_request, sched.schedule

    def _preempt_request(request: Any, *args: Any, **kwargs: Any) -> Any:
        before[request.request_id] = int(request.num_computed_tokens)
        return preempt(request, *args, **kwargs)

    def _schedule(*args: Any, **kwargs: Any) -> Any:
        out = schedule(*args, **kwargs)
        for rid in out.scheduled_cached_reqs.resumed_req_ids:
            if rid not in before:
                continue
            start = int(sched.requests[rid].num_computed_tokens) - int(out.num_scheduled_tokens.get(rid, 0))
            stats["resumed"] += 1
            stats["recomputed_tokens"] += max(0, before.pop(rid) - start)
        return out

    sched._preempt_request, sched.schedule = _preempt_request, _schedule
    return stats


def run_policy(policy: str, seed: int, o: dict[str, Any], slo: tuple[float, float], workdir: Path,
               traces: dict[tuple[str, int], Any] | None = None,
               probe: Callable[[Any], float] | None = None,
               step_logs: dict[tuple[str, int], Any] | None = None) -> dict[str, Any]:
    """One real-engine run: metrics as ``bench sim``'s, engine counters, host load. ``traces``, if given,
    receives the run's :class:`~superinfer.sim.engine.Trace` under ``(policy, seed)``. ``probe``, if given,
    is called with the open engine just before the replay and just after it (when the engine drained):
    ``out["probe_s"]`` holds what it returned (the host's speed at the time, ``bench fidelity``).
    ``step_logs``, if given, receives the replay's per-step record (:class:`~superinfer.vllm.steplog.StepLog`)
    under ``(policy, seed)``."""
    from superinfer.bench.engine.replay import (ENGINE_POLICIES, ROTA_POLICIES, EngineSpec, open_engine, replay,
                                                scheduler_of, to_trace)
    from superinfer.bench.engine.variants import split_variant
    from superinfer.core import Tenant, TenantTable
    from superinfer.sim.metrics import run_metrics
    from superinfer.vllm import kvworker

    w, arr, prompt, output, prompts = _requests(_workload(o), o["arrival"], o["rps"], o["duration"], seed,
                                               o["max_model_len"])
    ttft_slo, tbt_slo = slo
    params = {"ttft_slo": ttft_slo, "tbt_slo": tbt_slo, "b_xfer": o["b_xfer"],  # unset knobs: the file's default
              **{k: o[k] for k in PARAM_BOUNDS if o.get(k) is not None}}
    engine_policy, overrides = split_variant(policy, ENGINE_POLICIES)  # a label: POLICY[@KNOB=VALUE+...]
    setting = overrides.pop("async_scheduling", None)  # an engine setting, not a knob
    async_scheduling = None if setting is None else bool(setting)
    params.update(overrides)
    spec = EngineSpec(model=o["model"], policy=engine_policy, num_blocks=o["num_blocks"], block_size=o["block_size"],
                      max_model_len=o["max_model_len"], max_num_seqs=o["max_num_seqs"],
                      max_num_batched_tokens=o["max_num_batched_tokens"], params=params,
                      host_blocks=o["host_blocks"], load=o.get("load"), calibration=o.get("calibration"),
                      async_scheduling=async_scheduling)
    closed = len(kvworker.CLOSED)
    with open_engine(spec, workdir) as llm:
        stock = instrument_stock(scheduler_of(llm)) if engine_policy not in ROTA_POLICIES else None
        probed = [probe(llm)] if probe is not None else []
        if step_logs is not None:  # after the probe: the replay's steps only
            from superinfer.vllm.steplog import StepLog, attach_stock

            log = step_logs[(policy, seed)] = StepLog()
            if stock is None:
                scheduler_of(llm).step_log = log
            else:
                attach_stock(scheduler_of(llm), log)
        load = HostLoad()
        r = replay(llm, arr, prompts, output, o["duration"], o["drain"],
                   max_queue_s=o.get("max_queue_s") or float("inf"))
        host = load.result()
        if probe is not None and not llm.llm_engine.has_unfinished_requests():
            probed.append(probe(llm))
        counters: dict[str, int] = {"preemptions": r.preemptions, **r.counters}
        engine = {"preemptions": r.preemptions, "rotations": 0, "forced_victims": 0, "admissions_refused": 0,
                  "resumed": 0, "recomputed_tokens": 0, "swap_ins": 0, "swap_in_blocks": 0, "swap_out_blocks": 0,
                  "sync_blocks": 0, "recompute_fallbacks": 0, "fallback_tokens": 0}
        if stock is not None:
            engine.update(stock)
        else:
            st = scheduler_of(llm).stats_dict()
            sc, led = st["scheduler"], st.get("ledger", {})
            engine.update(rotations=int(sc.get("rotations", 0)), forced_victims=int(sc.get("forced_victims", 0)),
                          admissions_refused=int(sc.get("admissions_refused", 0)),
                          resumed=int(sc.get("resumed", 0)), recomputed_tokens=int(sc.get("recomputed_tokens", 0)),
                          swap_ins=int(led.get("loads", 0)), swap_in_blocks=int(led.get("swap_in_blocks", 0)),
                          swap_out_blocks=int(led.get("swap_out_blocks", 0)), sync_blocks=int(led.get("sync_blocks", 0)),
                          recompute_fallbacks=int(led.get("recompute_fallbacks", 0)),
                          fallback_tokens=int(led.get("fallback_tokens", 0)))
            counters.update(rotations=engine["rotations"], recompute_fallbacks=engine["recompute_fallbacks"],
                            held_steps=int(sc.get("held_steps", 0)))
            engine["plan_sums"] = {k: int(sc.get(k, 0)) for k in PLAN_SUMS}
    if len(kvworker.CLOSED) > closed:  # an in-process engine's KV worker: its connector cost sums
        worker = kvworker.CLOSED[-1]
        engine["kv_sums"] = {f"{kind}_{k}": int(worker.get(f"{kind}_{k}", 0))
                             for kind in kvworker.KV_KINDS for k in ("n", "x", "xx", "ns", "ns_x")}
    tenants = TenantTable([Tenant("default", ttft_slo, tbt_slo)])
    n = arr.shape[0]
    trace = to_trace(r, np.zeros(n, np.int64), np.zeros(len(r.gaps), np.int64), counters,
                     num_blocks=o["num_blocks"], block_size=o["block_size"])
    if traces is not None:
        traces[(policy, seed)] = trace
    out = {"policy": policy, "rps": o["rps"], "seed": seed}
    out.update(run_metrics(trace, tenants, w.duration_s or o["duration"]))
    out["engine_steps"] = r.steps
    out["unfinished"] = int(np.count_nonzero(np.isnan(r.t_end) & np.isnan(r.t_shed)))  # neither ended nor shed
    out["engine_counters"] = engine
    for k in ("resumed", "recomputed_tokens", "swap_ins", "swap_in_blocks", "swap_out_blocks"):
        out[k] = engine[k]
    out["host"] = host
    if probe is not None:
        out["probe_s"] = probed
    return out


#: where ``bench vllm`` / ``bench fidelity`` default a knob otherwise than the core's table (``KNOBS``); None:
#: unset, so the params file's default (the table's) applies. α and δ_B: the table's, always written. δ_F:
#: **0.0, not the table's 0.5 s**, since the first ``bench vllm`` (its commit gave no reason), and kept: δ_F is
#: an absolute offset (s) to the TTFT SLO, and 0.5 s is the paper's for a 5 s SLO, while these benches' are
#: a few times the engine's unloaded latency (the tiny CPU Llama: TTFT SLO 12-18 ms), where 0.5 s would hold every
#: waiting request back ~30 SLOs. Every recorded real-engine result (bench/results/bench_vllm_*,
#: fidelity_*, reasoning/vllm_*) ran with 0.0; ``--delta-f 0.5`` gives the table's.
ENGINE_KNOB_DEFAULTS: dict[str, float | int | None] = {
    **{k: None for k in PARAM_BOUNDS if k not in ("alpha", "delta_b")}, "delta_f": 0.0}


def _knob_note(k: Any) -> str:
    """The help's note on a knob whose default here is not the table's."""
    if k.name not in ENGINE_KNOB_DEFAULTS:
        return ""
    if ENGINE_KNOB_DEFAULTS[k.name] is None:
        return f" (unset: the params default, {k.default})"
    return f" (the core's default, {k.default}, is sized for SLOs of seconds; these benches' are milliseconds)"


def engine_options(f: Any) -> Any:
    """The options of ``bench vllm`` that describe the engine, the requests and the policies' knobs (shared
    with ``bench fidelity``)."""
    for deco in reversed(_ENGINE_OPTIONS):
        f = deco(f)
    return f


def _workload(o: dict) -> str:
    """The workload spec, with ``--start-s`` where the command has it."""
    return str(with_start(o["workload"], o.get("start_s")))


_ENGINE_OPTIONS = [
    click.option("--model", "model_dir", default=None, type=click.Path(file_okay=False), help="Model directory."),
    click.option("--build-tiny", default=None, type=click.Path(file_okay=False), help="Build the tiny Llama here and use it."),
    click.option("--tiny-shape", default="2,128,256", show_default=True, callback=tiny_shape_option,
                 help="LAYERS,HIDDEN,INTERMEDIATE of the --build-tiny model (4,256,768: recompute costs more)."),
    click.option("--workload", default="chat", show_default=True,
                 help="Trace path, servegen:DIR or chat|code|long-context|reasoning (as bench sim)."),
    start_s_option,
    click.option("--arrival", default="poisson", show_default=True, help="poisson | gamma:<b> | hawkes[:n[:decay]] | trace"),
    click.option("--rps", default=4.0, show_default=True, type=click.FloatRange(min=0, min_open=True)),
    click.option("--duration", default=30.0, show_default=True, type=click.FloatRange(min=1.0), help="Seconds of arrivals."),
    click.option("--drain", default=60.0, show_default=True, type=click.FloatRange(min=0)),
    click.option("--policies", default="vllm,vllm-priority,lvf-paper,lvf,lvf-hbm", show_default=True,
                 help="Engine policies; POLICY@KNOB=VALUE[+KNOB=VALUE] is a variant with those knobs for its runs."),
    click.option("--seeds", default=2, show_default=True, type=click.IntRange(1, 100)),
    click.option("--ttft-slo", default=None, type=click.FloatRange(min=0, min_open=True), help="Seconds (else --slo-scale)."),
    click.option("--tbt-slo", default=None, type=click.FloatRange(min=0, min_open=True), help="Seconds (else --slo-scale)."),
    click.option("--slo-scale", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
                  help="SLOs = this x the unloaded TTFT / mean TBT of a median request."),
    knob_options(ENGINE_KNOB_DEFAULTS, _knob_note),  # every knob of the core's table
    click.option("--b-xfer", default=64, show_default=True, type=click.IntRange(min=0)),
    click.option("--num-blocks", default=64, show_default=True, type=click.IntRange(min=2), help="KV blocks (pressure)."),
    click.option("--host-blocks", default=4096, show_default=True, type=click.IntRange(min=1)),
    click.option("--load", default=None, type=click.Choice(["sync", "async"]),
                  help="lvf: DuplexKVConnector loads of parked KV (default: the connector's)."),
    click.option("--calibration", default=None, type=click.Path(exists=True, dir_okay=False),
                  help="lvf: a calibration file (superinferd calibrate) of this engine: the step-time model of "
                       "RotaSched v2's SLO token budget (step_slo_share). Without one the plugin keeps vLLM's budget."),
    click.option("--block-size", default=32, show_default=True, type=click.IntRange(min=1)),
    click.option("--max-model-len", default=512, show_default=True, type=click.IntRange(min=64)),
    click.option("--max-num-seqs", default=64, show_default=True, type=click.IntRange(min=1)),
    click.option("--max-num-batched-tokens", default=2048, show_default=True, type=click.IntRange(min=1)),
    click.option("--threads", default=None, type=click.IntRange(min=1),
                  help="Engine CPU threads (torch.set_num_threads before the first engine; default: torch's). "
                       "1 keeps a shared host's other load from stalling the OpenMP barriers of every step."),
]


def prepare(o: dict[str, Any], workdir: Path) -> tuple[list[str], tuple[float, float], dict[str, float] | None]:
    """Validate the options, build the tiny model if asked, set the threads, and fix the SLOs (given, or
    ``--slo-scale`` x the unloaded TTFT / TBT of a median request measured on the stock engine): returns
    (policies, (ttft_slo, tbt_slo), the unloaded measurements or None)."""
    from superinfer.bench.engine.replay import ENGINE_POLICIES
    from superinfer.bench.engine.variants import VariantError, split_variant
    from superinfer.vllm.compat import check_vllm_version

    if (o["model_dir"] is None) == (o["build_tiny"] is None):
        raise click.UsageError("give exactly one of --model DIR or --build-tiny DIR")
    _workload(o)  # a bad --start-s fails here, before any engine starts
    policies = [p.strip() for p in str(o["policies"]).split(",") if p.strip()]
    if not policies or len(set(policies)) < len(policies):
        raise click.BadParameter(f"expected distinct policies, got {o['policies']!r}", param_hint="--policies")
    for p in policies:
        try:
            split_variant(p, ENGINE_POLICIES)
        except VariantError as exc:
            raise click.BadParameter(str(exc), param_hint="--policies") from None
    try:
        check_vllm_version()
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    o["rt_throttled_share"] = rt_throttle()  # kept in the JSON's config: such figures are biased at load
    if o["rt_throttled_share"]:
        click.echo(f"warning: this process runs under a real-time policy, which the kernel stops for "
                   f"{100 * o['rt_throttled_share']:.0f} % of every period once it is busy the whole period "
                   "(kernel.sched_rt_runtime_us): a busy engine measures slower than it is. Run it under "
                   "'nice -n -20' instead (or set kernel.sched_rt_runtime_us=-1).", err=True)
    if o["build_tiny"]:
        from superinfer.daemon.backends.tiny import build_tiny_llama

        o["model"] = str(build_tiny_llama(Path(o["build_tiny"]), **o["tiny_shape"]))
    else:
        o["model"] = str(o["model_dir"])
    if o["threads"]:
        import torch

        torch.set_num_threads(int(o["threads"]))
    _, _, prompt, output, _ = _requests(_workload(o), o["arrival"], o["rps"], o["duration"], 0, o["max_model_len"])
    measured = None
    if o["ttft_slo"] is None or o["tbt_slo"] is None:
        engine_kw = dict(model=o["model"], num_blocks=max(o["num_blocks"], 256), block_size=o["block_size"],
                         max_model_len=o["max_model_len"], max_num_seqs=o["max_num_seqs"],
                         max_num_batched_tokens=o["max_num_batched_tokens"])
        u_ttft, u_tbt = _unloaded(engine_kw, int(np.median(prompt)), int(max(2, np.median(output))), workdir)
        measured = {"unloaded_ttft_s": u_ttft, "unloaded_tbt_s": u_tbt}
    slo = (o["ttft_slo"] or o["slo_scale"] * measured["unloaded_ttft_s"],  # type: ignore[index]
           o["tbt_slo"] or o["slo_scale"] * measured["unloaded_tbt_s"])  # type: ignore[index]
    return policies, slo, measured


@click.command("vllm")
@engine_options
@click.option("--capacity-share", default=None, callback=parse_shares, metavar="S1,S2,...",
              help="Loads as shares (> 0) of the engine's capacity measured at the start (not with --rps): "
                   "K = --capacity-requests requests of the workload (seed 0) all at t=0 on the stock engine, "
                   "same sizes; capacity = K / the time until the last finishes, in req/s (the second of "
                   "two such bursts: the first warms the process up).")
@click.option("--capacity-requests", default=48, show_default=True, type=click.IntRange(min=1),
              help="K, the burst that measures the capacity.")
@click.option("--capacity-end/--no-capacity-end", default=True, show_default=True,
              help="With --capacity-share: measure the capacity again after the runs (the host's drift).")
@click.option("--pairs", default=None, metavar="A:B,...",
              help="Paired differences A - B over seeds (default: every policy vs vllm, and lvf vs lvf-hbm).")
@click.option("--max-queue-s", default=None, type=click.FloatRange(min=0, min_open=True),
              help="First-token deadline (s), every policy alike, as a client's timeout: a request still "
                   "without a token this long after it arrived is aborted through vLLM's abort path and counted "
                   "shed (a miss of both SLOs). Default: none.")
@click.option("--save-trace", default=None, type=click.Path(dir_okay=False), help="Write the seed-0 requests as Mooncake JSONL.")
@click.option("--json", "json_path", default=None, help="Write the JSON here ('-' for stdout).")
def bench_vllm(**o: Any) -> None:
    """Compare policies on a real vLLM engine: attainment, tails, throughput, with 95 % CIs."""
    from superinfer.sim.metrics import summarise

    shares = o["capacity_share"]
    if shares and click.get_current_context().get_parameter_source("rps") is not ParameterSource.DEFAULT:
        raise click.UsageError("give either --rps or --capacity-share, not both")
    pairs = parse_pairs(o["pairs"], [p.strip() for p in str(o["policies"]).split(",") if p.strip()])
    capacity = capacity_end = None
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        policies, slo, measured = prepare(o, workdir)
        if shares:
            capacity = start_capacity(o, workdir, _requests)
            click.echo(f"capacity: {capacity['rps']:.3f} req/s ({capacity['requests']} requests at t=0, "
                       f"makespan {capacity['makespan_s']:.2f} s)", err=True)
        loads = [(s, s * capacity["rps"]) for s in shares] if capacity else [(None, o["rps"])]
        if o["save_trace"]:
            from superinfer.bench.engine.replay import write_mooncake

            _, arr, prompt, output, _ = _requests(_workload(o), o["arrival"], loads[0][1], o["duration"], 0,
                                                  o["max_model_len"])
            write_mooncake(Path(o["save_trace"]), arr, prompt, output)
        # Per seed, per load, every policy on the same requests, the order rotated by seed and load (no policy
        # always runs first on a host whose load drifts). Each run is appended to <json>.runs.jsonl as it
        # finishes, so a later failure (an engine, the summary) never loses the runs before it.
        partial = (Path(str(o["json_path"]) + ".runs.jsonl")
                   if o["json_path"] and o["json_path"] != "-" else None)
        runs = run_interleaved(policies, loads, o["seeds"],
                               lambda p, s, rps: run_policy(p, s, {**o, "rps": rps}, slo, workdir), partial)
        if capacity and o["capacity_end"]:
            capacity_end = end_capacity(o, workdir, _requests, capacity)
    result = {
        "command": "superinferd bench vllm " + " ".join(sys.argv[3:]),
        "config": {k: v for k, v in o.items() if k != "json_path"},
        "slo": {"ttft_slo_s": slo[0], "tbt_slo_s": slo[1], "measured": measured},
        "runs": runs,
    }
    if capacity:
        result.update(capacity=capacity, capacity_end=capacity_end)
    with keep_runs(result):  # the runs are written whatever goes wrong in their summary
        result["summary"] = summarise(runs)
        result["engine_counters_mean"] = counters_mean(runs, policies)
        result["paired"] = paired_results(runs, pairs)
    write_result(result, o["json_path"])  # type: ignore[arg-type]
    if o["json_path"] != "-":
        echo_summary(result, runs, slo)
