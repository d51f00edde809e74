"""`superinferd bench sched`: time one planning iteration of the scheduler core.

The state is what a loaded GH200 serving Llama-3-8B looks like under memory pressure: HBM full of
running requests (realistic block counts from a chat length mix), the rest waiting or parked in DRAM,
and the clock set so that some waiting and rotary requests lag their SLOs, so LVF has to rotate.
Times are wall-clock per ``Policy.plan`` call (validation, VLT, planning), median and P99 of repeats.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import click
import numpy as np

from superinfer.core import Capacity, Params, Phase, Snapshot, Tenant, TenantTable, get_policy
from superinfer.core.types import blocks_for

BLOCK_SIZE = 16
HBM_BLOCKS = 54_000  # Llama-3-8B on a 144 GB GH200: (0.9 * 144 GB - 16 GB weights) / 2 MiB per block
B_XFER = 2400  # the paper's budget
TOKEN_BUDGET = 16_384  # the paper's max_num_batched_tokens
MAX_NUM_SEQS = 1024


def pressure_state(n: int, seed: int = 0) -> tuple[Snapshot, Capacity, TenantTable, float]:
    """``n`` live requests: HBM full of running ones, the rest waiting (60 %) or rotary (40 %)."""
    rng = np.random.default_rng(seed)
    now = 1000.0
    prompt = np.clip(rng.lognormal(np.log(1020), 0.5, n), 16, 8000).astype(np.int64)
    output = np.clip(rng.lognormal(np.log(130), 0.8, n), 1, 2000).astype(np.int64)
    blocks = blocks_for(prompt + output // 2, BLOCK_SIZE)
    n_run = int(np.searchsorted(np.cumsum(blocks), HBM_BLOCKS - 64, side="right"))
    n_run = min(n_run, MAX_NUM_SEQS, n // 2)
    phase = np.full(n, Phase.WAITING, np.int8)
    phase[:n_run] = Phase.RUNNING
    rest = np.arange(n_run, n)
    phase[rest[rng.random(rest.shape[0]) < 0.4]] = Phase.ROTARY
    running, rotary, waiting = phase == Phase.RUNNING, phase == Phase.ROTARY, phase == Phase.WAITING
    t_arr = now - rng.uniform(0, 12, n)
    computed = np.where(waiting, 0, prompt + output // 2)
    num_tokens = np.where(waiting, prompt, computed + 1)
    data = blocks_for(computed, BLOCK_SIZE)
    synced = np.where(running, np.maximum(data - 1, 0), 0)
    cols = dict(
        req_id=np.arange(n),
        phase=phase,
        t_arr=t_arr,
        t_last=np.where(waiting, t_arr, now - rng.uniform(0, 0.5, n)),
        t_run=np.where(running, now - rng.uniform(0, 10, n), t_arr),
        tenant=rng.integers(0, 3, n),
        num_tokens=num_tokens,
        num_computed=computed,
        blocks_hbm=np.where(running, data, 0),
        blocks_dram=np.where(rotary, data, synced),
        synced=synced,
        residency=rng.integers(0, 50, n),
        rotations=rng.integers(0, 3, n),
        pred_remaining=output.astype(np.float64),
    )
    snap = Snapshot.from_columns(**cols)
    used = int(snap.blocks_hbm.sum())
    cap = Capacity(
        hbm_blocks=HBM_BLOCKS,
        free_blocks=HBM_BLOCKS - used,
        b_xfer=B_XFER,
        token_budget=TOKEN_BUDGET,
        max_num_seqs=MAX_NUM_SEQS,
        block_size=BLOCK_SIZE,
        dram_free_blocks=200_000,
    )
    tenants = TenantTable([Tenant("chat", 5.0, 0.1, 1.0), Tenant("voice", 2.0, 0.05, 2.0), Tenant("batch", 30.0, 0.5, 1.0)])
    return snap, cap, tenants, now


def time_plan(n: int, policy: str, repeats: int, seed: int = 0) -> dict:
    snap, cap, tenants, now = pressure_state(n, seed)
    pol, params = get_policy(policy), Params()
    plan = pol.plan(snap, cap, params, tenants, now)  # warm-up; also reported below
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        pol.plan(snap, cap, params, tenants, now)
        samples.append((time.perf_counter_ns() - t0) / 1000.0)
    samples.sort()
    return {
        "live_requests": n,
        "policy": policy,
        "median_us": round(statistics.median(samples), 1),
        "p99_us": round(samples[min(len(samples) - 1, int(0.99 * len(samples)))], 1),
        "repeats": repeats,
        "running": int((snap.phase == Phase.RUNNING).sum()),
        "rotary": int((snap.phase == Phase.ROTARY).sum()),
        "waiting": int((snap.phase == Phase.WAITING).sum()),
        "fcfs_fallback": plan.fcfs_fallback,
        "scheduled": int(plan.sched_ids.size),
        "victims": int(plan.victim_ids.size),
        "swap_in_blocks": plan.h2d_blocks,
        "d2h_blocks": plan.d2h_blocks,
    }


def _sizes(value: str) -> list[int]:
    try:
        sizes = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise click.BadParameter(f"expected positive sizes, got {value!r}")
    return sizes


@click.command("sched")
@click.option("--sizes", default="1000,10000,50000", show_default=True, help="Live requests per run.")
@click.option("--policy", default="lvf", show_default=True, help="Policy to time.")
@click.option("--repeats", default=200, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--output", type=click.Path(dir_okay=False), help="Also write the JSON here.")
@click.option("--vllm", "vs_vllm", is_flag=True,
              help="Instead: time RotaScheduler.schedule() against vLLM's Scheduler.schedule() (needs vLLM).")
def bench_sched(sizes: str, policy: str, repeats: int, as_json: bool, output: str | None, vs_vllm: bool) -> None:
    """Time one planning iteration (mixed phases, memory pressure on)."""
    if vs_vllm:  # --- vLLM plugin overhead (superinfer.bench.sched_vllm); owned by the vLLM issue ---
        from superinfer.bench.sched_vllm import bench_vllm_schedule

        vres = bench_vllm_schedule(repeats=min(repeats, 25))
        text = json.dumps(vres, indent=2)
        if output:
            with open(output, "w") as fh:
                fh.write(text + "\n")
        click.echo(text if as_json else
                   f"schedule() on {vres['waiting']} waiting + {vres['running']} running: vLLM "
                   f"{vres['stock_median_us']} µs, RotaScheduler {vres['rota_median_us']} µs, "
                   f"ratio {vres['ratio_median']} (min {vres['ratio_min']}, max {vres['ratio_max']}; target <= 1.5)")
        return
    try:
        get_policy(policy)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--policy") from None
    runs = [time_plan(n, policy, repeats) for n in _sizes(sizes)]
    result = {
        "command": "superinferd bench sched " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else "superinferd bench sched",
        "runs": runs,
    }
    text = json.dumps(result, indent=2)
    if output:
        with open(output, "w") as fh:
            fh.write(text + "\n")
    if as_json:
        click.echo(text)
        return
    click.echo(f"{'live':>8} {'running':>8} {'median µs':>10} {'p99 µs':>10} {'victims':>8} {'swap-in blk':>11}")
    for r in runs:
        click.echo(f"{r['live_requests']:>8} {r['running']:>8} {r['median_us']:>10} {r['p99_us']:>10} "
                   f"{r['victims']:>8} {r['swap_in_blocks']:>11}")
