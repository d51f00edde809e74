"""`superinferd plan`: the fewest GPUs (tensor x pipeline x replicas, policy) that meet an SLO target.

Progress goes to stderr, one line per simulated configuration; the result is a table (stdout), or with
``--json`` the JSON document on stdout (the table then goes to stderr). Exit codes: 0 a configuration
meets the target, 1 none does within ``--max-gpus``, 2 usage error.
"""

from __future__ import annotations

import json
import sys
import time

import click

from superinfer.sim.engine import SIM_POLICIES
from superinfer.sim.fleet import BALANCERS
from superinfer.sim.grounded import GPU_COSTS
from superinfer.sim.options import positive_ints
from superinfer.sim.workload import WorkloadError


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:5.1f}"


def table(result: dict) -> str:
    """The configurations as aligned text: simulated ones, then the infeasible layouts and why."""
    lines = [f"{'TP':>3} {'PP':>3} {'rep':>4} {'GPUs':>5} {'policy':<10} {'SLO %':>6} {'TTFT %':>7} "
             f"{'TBT %':>6} {'tok/s':>9}  note"]
    best = result["best"]
    for c in result["configs"]:
        if not c.get("feasible"):
            continue
        mark = "<- best" if best is not None and all(c[k] == best[k] for k in ("tp", "pp", "replicas", "policy")) \
            else ("meets target" if c["meets_target"] else "")
        lines.append(f"{c['tp']:>3} {c['pp']:>3} {c['replicas']:>4} {c['gpus']:>5} {c['policy']:<10} "
                     f"{_pct(c['slo_attainment']):>6} {_pct(c['ttft_attainment']):>7} {_pct(c['tbt_attainment']):>6} "
                     f"{c['throughput_tok_s']:>9.0f}  {mark}")
    for c in result["configs"]:
        if not c.get("feasible"):
            lines.append(f"{c['tp']:>3} {c['pp']:>3} {'-':>4} {c['gpus']:>5} {'-':<10} {'':>6} {'':>7} {'':>6} "
                         f"{'':>9}  infeasible: {c['reason']}")
    spec = result["spec"]
    if best is None:
        lines.append(f"no configuration within {spec['max_gpus']} GPUs reaches {100 * spec['slo_target']:.1f} % SLO "
                     f"attainment at {spec['rps']:g} req/s")
    else:
        lines.append(f"best: {best['gpus']} x {spec['hardware']} as {best['replicas']} replica(s) of TP={best['tp']} "
                     f"PP={best['pp']} with {best['policy']}: SLO attainment {100 * best['slo_attainment']:.1f} % "
                     f"(target {100 * spec['slo_target']:.1f} %) at {spec['rps']:g} req/s")
    return "\n".join(lines)


@click.command("plan")
@click.option("--model", required=True, help="Model profile (superinfer.sim.models), e.g. llama-3-70b.")
@click.option("--hardware", required=True, help="Hardware profile (superinfer.sim.hardware), e.g. h100-pcie, gh200.")
@click.option("--rps", required=True, type=click.FloatRange(min=0, min_open=True), help="Request rate of the whole fleet.")
@click.option("--workload", default="chat", show_default=True, help="Synthetic name or trace path (as bench sim).")
@click.option("--arrival", default="poisson", show_default=True, help="poisson | gamma:<b> | hawkes[:n[:decay]]")
@click.option("--slo-target", default=0.95, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Share of requests that must meet both SLOs.")
@click.option("--max-gpus", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--policies", default="vllm,lvf", show_default=True, help="Policies to try.")
@click.option("--balancer", default="least-loaded", show_default=True, type=click.Choice(BALANCERS))
@click.option("--fabric", default=None, help="GPU interconnect (superinfer.sim.fabric), e.g. nvlink-bridge; "
              "default: the hardware's plain one.")
@click.option("--tp", "tp", default="1,2,4,8", show_default=True, help="Tensor-parallel sizes to try.")
@click.option("--pp", "pp", default="1,2,4", show_default=True, help="Pipeline-parallel sizes to try.")
@click.option("--duration", default=60.0, show_default=True, type=click.FloatRange(min=1.0), help="Seconds of arrivals.")
@click.option("--seeds", default=1, show_default=True, type=click.IntRange(1, 100))
@click.option("--ttft-slo", default=5.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--tbt-slo", default=0.1, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--max-num-seqs", default=256, show_default=True, type=click.IntRange(min=1))
@click.option("--max-num-batched-tokens", default=8192, show_default=True, type=click.IntRange(min=1))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--drain", default=60.0, show_default=True, type=click.FloatRange(min=0), help="Seconds to drain after arrivals.")
@click.option("--workers", default=None, type=click.IntRange(min=1), help="Processes (default: up to 2).")
@click.option("--gpu-costs", type=click.Choice(GPU_COSTS), default="datasheet", show_default=True,
              help="GPU iteration costs: datasheet roofline, or terms fitted to measured GPU profiles with the "
                   "fitted CPU line (grounded) or the constant overhead (grounded-gpu).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON result on stdout (table to stderr).")
def plan(**o: object) -> None:
    """Search (TP, PP, replicas, policy) on the twin for the fewest GPUs meeting the SLO target at --rps."""
    from superinfer.sim.plan import PlanSpec, search

    policies = tuple(p.strip() for p in str(o["policies"]).split(",") if p.strip())
    if not policies or any(p not in SIM_POLICIES for p in policies):
        raise click.BadParameter(f"expected policies from {', '.join(SIM_POLICIES)}", param_hint="--policies")
    try:
        spec = PlanSpec(model=str(o["model"]), hardware=str(o["hardware"]), rps=float(o["rps"]),  # type: ignore[arg-type]
                        workload=str(o["workload"]), arrival=str(o["arrival"]), slo_target=float(o["slo_target"]),  # type: ignore[arg-type]
                        max_gpus=int(o["max_gpus"]), policies=policies, balancer=str(o["balancer"]),  # type: ignore[arg-type]
                        fabric=o["fabric"], duration_s=float(o["duration"]), seeds=int(o["seeds"]),  # type: ignore[arg-type]
                        ttft_slo=float(o["ttft_slo"]), tbt_slo=float(o["tbt_slo"]),  # type: ignore[arg-type]
                        block_size=int(o["block_size"]), max_num_seqs=int(o["max_num_seqs"]),  # type: ignore[arg-type]
                        max_num_batched_tokens=int(o["max_num_batched_tokens"]), drain_s=float(o["drain"]),  # type: ignore[arg-type]
                        tp_choices=tuple(positive_ints(str(o["tp"]), "--tp")),
                        pp_choices=tuple(positive_ints(str(o["pp"]), "--pp")),
                        gpu_costs=str(o["gpu_costs"]))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    t0 = time.monotonic()

    def progress(c: dict, done: int, total: int) -> None:
        click.echo(f"[{done}/{total}] TP={c['tp']} PP={c['pp']} x{c['replicas']} ({c['gpus']} GPUs) {c['policy']}: "
                   f"SLO {100 * c['slo_attainment']:.1f} %, TTFT {100 * c['ttft_attainment']:.1f} %, "
                   f"TBT {100 * c['tbt_attainment']:.1f} %, {c['throughput_tok_s']:.0f} tok/s "
                   f"({time.monotonic() - t0:.0f} s)", err=True)

    click.echo(f"planning {spec.model} on {spec.hardware} at {spec.rps:g} req/s ({spec.workload}, {spec.duration_s:g} s "
               f"x {spec.seeds} seed(s)), target {100 * spec.slo_target:g} % SLO attainment, up to {spec.max_gpus} GPUs",
               err=True)
    try:
        result = search(spec, progress, o["workers"])  # type: ignore[arg-type]
    except (WorkloadError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    result["command"] = "superinferd plan " + " ".join(sys.argv[2:])
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    click.echo(table(result), err=bool(o["as_json"]))
    if o["as_json"]:
        click.echo(json.dumps(result, indent=1))
    sys.exit(0 if result["best"] is not None else 1)
