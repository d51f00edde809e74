"""`superinferd bench sim`: the simulator's policy comparison (design §6)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import click

from superinfer.bench.output import keep_runs, write_result
from superinfer.bench.twin.capacity import capacity_lines, slo_capacity
from superinfer.bench.twin.grid import grid, run_grid
from superinfer.core import PARAM_BOUNDS, Params, Tenant, TenantTable
from superinfer.sim.build import HOST_OVERLAP
from superinfer.sim.engine import SIM_POLICIES
from superinfer.sim.grounded import GPU_COSTS
from superinfer.sim.options import knob_options, positive_floats, start_s_option, with_start
from superinfer.sim.metrics import summarise
from superinfer.sim.run import RunSpec
from superinfer.sim.workload import WorkloadError


def _policies(value: str) -> list[str]:
    names = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in names if p not in SIM_POLICIES]
    if bad or not names:
        raise click.BadParameter(f"unknown policy {bad}; valid: {', '.join(SIM_POLICIES)}", param_hint="--policies")
    return names


def _tenants(value: str | None, ttft: float, tbt: float) -> tuple[TenantTable, tuple[tuple[str, float], ...]]:
    """``name:ttft_s:tbt_s:weight:share,...`` or the single default tenant with the given SLOs."""
    if not value:
        return TenantTable([Tenant("default", ttft, tbt, 1.0)]), ()
    tenants, mix = [], []
    for i, item in enumerate(value.split(",")):
        parts = item.split(":")
        if len(parts) != 5:
            raise click.BadParameter(f"tenant {i + 1} {item!r}: expected name:ttft_s:tbt_s:weight:share",
                                     param_hint="--tenants")
        try:
            name, t, b, w, share = parts[0], float(parts[1]), float(parts[2]), float(parts[3]), float(parts[4])
            tenants.append(Tenant(name, t, b, w))
        except ValueError as exc:
            raise click.BadParameter(f"tenant {i + 1} {item!r}: {exc}", param_hint="--tenants") from None
        mix.append((name, share))
    try:
        return TenantTable(tenants), tuple(mix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tenants") from None


@click.command("sim")
@click.option("--workload", default="chat", show_default=True,
              help="Trace path (azure/sharegpt/burstgpt/mooncake), servegen:DIR (production traffic per client), or "
                   "chat|code|sharegpt|lmsys|long-context|reasoning.")
@start_s_option
@click.option("--arrival", default="poisson", show_default=True, help="poisson | gamma:<b> | hawkes[:n[:decay]] | trace")
@click.option("--model", default="llama-3-8b", show_default=True)
@click.option("--hardware", default="gh200", show_default=True)
@click.option("--rps", default="35,40,45,50,55,60", show_default=True, help="Comma-separated request rates, or 'trace' with --arrival trace: the trace's own times, unscaled.")
@click.option("--duration", default=120.0, show_default=True, type=click.FloatRange(min=1.0), help="Seconds of arrivals.")
@click.option("--policies", default="vllm,vllm-offload,priority,sarathi,sjf,lvf-paper,lvf,lvf-hbm,lvf-nooverlap",
              show_default=True)
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(1, 1000))
@click.option("--ttft-slo", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--tbt-slo", default=0.1, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--tenants", default=None, help="name:ttft_s:tbt_s:weight:share,... (overrides the SLO options)")
@click.option("--max-queue-s", default=None, type=click.FloatRange(min=0, min_open=True),
              help="First-token deadline of every tenant, applied to every policy alike (a client's timeout): "
                   "a request that waited this long without holding KV is shed, a miss of both SLOs. "
                   "Default: none.")
@click.option("--shed-at-admission", is_flag=True,
              help="With --max-queue-s: also shed at once a request whose predicted first-token wait (waiting "
                   "requests / first-token rate under load, measured in the run) passes its deadline, every policy "
                   "alike (the daemon's [slo].shed_at_admission).")
@knob_options()  # --alpha, --delta-b, --delta-f, ...: every knob of the core's table, with its default
@click.option("--b-xfer", default=None, type=click.IntRange(min=0), help="Blocks/iteration/direction (default: design §4 from the hardware profile).")
@click.option("--max-num-seqs", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--max-num-batched-tokens", default=8192, show_default=True, type=click.IntRange(min=1))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--dram-gib", default=None, type=click.FloatRange(min=0), help="Host KV pool (default: all DRAM of the profile).")
@click.option("--hbm-blocks", default=None, type=click.IntRange(min=1),
              help="Device KV blocks (default: what fits in the profile's HBM); e.g. a real engine's num_gpu_blocks.")
@click.option("--dram-blocks", default=None, type=click.IntRange(min=0), help="Host KV pool in blocks (excludes --dram-gib).")
@click.option("--drain", default=300.0, show_default=True, type=click.FloatRange(min=0), help="Seconds to drain after arrivals end.")
@click.option("--sjf-noise", default=0.0, show_default=True, type=click.FloatRange(min=0), help="Log-normal sigma of sjf's predictions.")
@click.option("--calibration", default=None, type=click.Path(exists=True, dir_okay=False), help="Measured calibration JSON.")
@click.option("--gpu-costs", type=click.Choice(GPU_COSTS), default="datasheet", show_default=True,
              help="GPU iteration costs: the datasheet roofline; operator terms fitted to measured A100/H100/H200 "
                   "profiles with vLLM's measured host work (grounded) or with the constant overhead (grounded-gpu); "
                   "docs/costmodel.md.")
@click.option("--host-overlap", type=click.Choice(HOST_OVERLAP), default="auto", show_default=True,
              help="With grounded costs, whose host work hides under the GPU's: every policy's, as vLLM's async "
                   "scheduling does on a GPU for stock vLLM and the plugin alike (auto, all; a step that parks "
                   "excepted), or none (--no-async-scheduling).")
@click.option("--skip-bad", is_flag=True, help="Count and skip malformed trace lines instead of failing.")
@click.option("--workers", default=None, type=click.IntRange(min=1), help="Processes (default: CPU count).")
@click.option("--json", "json_path", default=None, help="Write the JSON here ('-' for stdout).")
@click.option("--plot-dir", default=None, type=click.Path(file_okay=False), help="Write attainment-vs-RPS PNGs here.")
def bench_sim(**o: object) -> None:
    """Compare policies on the digital twin: attainment, tails, throughput, rotations, with 95 % CIs."""
    policies = _policies(str(o["policies"]))
    if o["dram_blocks"] is not None and o["dram_gib"] is not None:
        raise click.UsageError("give at most one of --dram-gib and --dram-blocks")
    if str(o["rps"]).strip() == "trace":
        if str(o["arrival"]) != "trace":
            raise click.BadParameter("'trace' (keep the trace's arrival times) needs --arrival trace", param_hint="--rps")
        rps: list[float | None] = [None]
    else:
        rps = list(positive_floats(str(o["rps"]), "--rps"))
    workload = str(with_start(str(o["workload"]), o["start_s"]))
    tenants, mix = _tenants(o["tenants"], float(o["ttft_slo"]), float(o["tbt_slo"]))  # type: ignore[arg-type]
    if o["max_queue_s"] is not None:
        tenants = TenantTable([replace(t, max_queue_s=float(o["max_queue_s"])) for t in tenants.tenants])
    try:
        params = Params(**{k: o[k] for k in PARAM_BOUNDS})  # type: ignore[arg-type]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    base = RunSpec(policy=policies[0], rps=rps[0], seed=0, workload=workload, arrival=str(o["arrival"]),
                   duration_s=float(o["duration"]), model=str(o["model"]), hardware=str(o["hardware"]),
                   block_size=int(o["block_size"]), max_num_seqs=int(o["max_num_seqs"]),
                   max_num_batched_tokens=int(o["max_num_batched_tokens"]), b_xfer=o["b_xfer"], params=params,  # type: ignore[arg-type]
                   tenants=tenants, tenant_mix=mix, dram_gib=o["dram_gib"], hbm_blocks=o["hbm_blocks"],  # type: ignore[arg-type]
                   dram_blocks=o["dram_blocks"], drain_s=float(o["drain"]),  # type: ignore[arg-type]
                   sjf_noise=float(o["sjf_noise"]), calibration=o["calibration"], skip_bad=bool(o["skip_bad"]),  # type: ignore[arg-type]
                   gpu_costs=str(o["gpu_costs"]), host_overlap=str(o["host_overlap"]),
                   shed_at_admission=bool(o["shed_at_admission"]))
    if o["shed_at_admission"] and o["max_queue_s"] is None:
        raise click.UsageError("--shed-at-admission needs a deadline: give --max-queue-s")
    if o["calibration"] and o["gpu_costs"] != "datasheet":
        raise click.UsageError("--calibration (a measured engine) and --gpu-costs grounded exclude each other")
    if o["host_overlap"] != "auto" and o["gpu_costs"] == "datasheet":
        raise click.UsageError("--host-overlap prices the grounded twin's host work: give --gpu-costs grounded")
    specs = grid(base, policies, rps, int(o["seeds"]))
    try:
        runs = run_grid(specs, o["workers"])  # type: ignore[arg-type]
    except (WorkloadError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    result = {
        "command": "superinferd bench sim " + " ".join(sys.argv[3:]),
        "config": {k: v for k, v in o.items() if k not in ("json_path", "plot_dir", "workers")},
        "runs": runs,
    }
    with keep_runs(result):  # the runs are written whatever goes wrong in their summary or plot
        result["summary"] = summarise(runs)
        if len(rps) > 1:
            result["slo_capacity"] = slo_capacity(result["summary"])
        if o["plot_dir"]:
            from superinfer.bench.twin.plots import attainment_vs_x

            path = os.path.join(str(o["plot_dir"]), f"attainment_{o['model']}_{o['hardware']}.png")
            attainment_vs_x(result["summary"], path, f"{o['model']} on {o['hardware']}, {o['workload']} ({o['arrival']})")
            result["plots"] = [path]
    write_result(result, o["json_path"])  # type: ignore[arg-type]
    if o["json_path"] != "-":
        _table(result["summary"])
        for line in capacity_lines(result.get("slo_capacity", {})):
            click.echo(line)


def _table(summary: list[dict]) -> None:
    click.echo(f"{'policy':<14} {'rps':>6} {'SLO att %':>18} {'TTFT att %':>18} {'TBT att %':>18} "
               f"{'gap att %':>9} {'TTFT p99 s':>10} {'tok/s':>9} {'rot':>7}")
    for r in summary:
        def ci(k: str) -> str:
            if k not in r:
                return "-"
            m, (lo, hi) = r[k]["mean"], r[k]["ci95"]
            return f"{100 * m:5.1f} [{100 * lo:4.1f},{100 * hi:5.1f}]"
        gap = f"{100 * r['tbt_gap_attainment']['mean']:9.1f}" if "tbt_gap_attainment" in r else f"{'-':>9}"
        click.echo(f"{r['policy']:<14} {r['rps']:>6g} {ci('slo_attainment'):>18} {ci('ttft_attainment'):>18} "
                   f"{ci('tbt_attainment'):>18} {gap} {r['ttft_p99_s']['mean']:>10.2f} "
                   f"{r['throughput_tok_s']['mean']:>9.0f} {r['rotations']['mean']:>7.0f}")
