"""``superinferd bench sched --vllm``: RotaScheduler.schedule() against vLLM's Scheduler.schedule().

Both schedulers are built the way vLLM's CPU-only scheduler tests build them
(:mod:`superinfer.bench.engine.synthetic`), get the same requests (``waiting`` of them, arrival times spread over
the last ``spread_s`` seconds) and are warmed up in lockstep with vLLM's own FCFS decisions (the
RotaScheduler runs with the core's ``fcfs`` policy during warm-up, which leaves every decision to vLLM),
until ``running`` requests decode and the KV pool is nearly full. Then exactly one ``schedule()`` of each
is timed on these identical queues, RotaScheduler planning with ``lvf`` (snapshot, VLT, plan, reorder,
admission). One discarded warm-up pair, then fresh pairs; the two calls of a pair run back to back, in alternating order, each
after a full garbage collection and with the collector paused during the call (the same for both).
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from superinfer.core import get_policy


def _pair_state(model_dir: Path, cls: type, waiting: int, running: int, prompt_len: int, block_size: int,
                spread_s: float, seed_time: float) -> Any:
    from superinfer.bench.engine.synthetic import create_requests, create_scheduler, fake_output

    blocks_per_req = -(-(prompt_len + 8) // block_size)
    sched = create_scheduler(model_dir, cls, num_blocks=running * blocks_per_req + 8, block_size=block_size,
                             max_num_seqs=running, max_num_batched_tokens=8192,
                             max_model_len=max(1024, prompt_len + 512))
    if hasattr(sched, "core_policy"):
        sched.core_policy = get_policy("fcfs")  # warm-up: vLLM decides (identical queues)
        sched.clock = lambda: seed_time
    n = waiting + running
    arrival = [seed_time - spread_s * (n - i) / n for i in range(n)]
    for r in create_requests(n, prompt_lens=[prompt_len] * n, max_tokens=400, arrival=arrival):
        sched.add_request(r)
    for _ in range(64):  # prefill in token-budget chunks until `running` requests decode
        out = sched.schedule()
        sched.update_from_output(out, fake_output(out))
        if len(sched.running) >= running and all(r.num_output_tokens > 0 for r in sched.running):
            break
    if hasattr(sched, "core_policy"):
        sched.core_policy = get_policy("lvf")
    return sched


def bench_vllm_schedule(*, waiting: int = 4000, running: int = 256, prompt_len: int = 120, block_size: int = 16,
                        repeats: int = 9, spread_s: float = 20.0, model_dir: Path | None = None) -> dict[str, Any]:
    """Median wall time of one ``schedule()`` on identical queues, stock vs RotaScheduler, and the ratio."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from superinfer.daemon.backends.tiny import build_tiny_llama
    from superinfer.vllm import RotaScheduler

    with tempfile.TemporaryDirectory() as tmp:
        model = model_dir or build_tiny_llama(Path(tmp) / "tiny", seed=0)
        stock_us: list[float] = []
        rota_us: list[float] = []
        ratios: list[float] = []
        info: dict[str, Any] = {}
        for rep in range(repeats + 1):  # repeat 0 warms imports and caches; not reported
            t = time.time()
            pair = {name: _pair_state(model, cls, waiting, running, prompt_len, block_size, spread_s, t)
                    for name, cls in (("stock", Scheduler), ("rota", RotaScheduler))}
            s, r = pair["stock"], pair["rota"]
            if [q.request_id for q in s.running] != [q.request_id for q in r.running] or len(s.waiting) != len(r.waiting):
                raise RuntimeError("bench sched --vllm: warm-up diverged; the queues are not identical")
            times = {}
            for name in (("stock", "rota") if rep % 2 == 0 else ("rota", "stock")):
                gc.collect()  # the warm-up made thousands of objects: no collection inside the timed call
                gc.disable()
                try:
                    t0 = time.perf_counter_ns()
                    out = pair[name].schedule()
                    times[name] = (time.perf_counter_ns() - t0) / 1000.0
                finally:
                    gc.enable()
                info[name] = {"scheduled": len(out.num_scheduled_tokens), "preempted": len(out.preempted_req_ids or ())}
            if rep == 0:
                continue
            stock_us.append(times["stock"])
            rota_us.append(times["rota"])
            ratios.append(times["rota"] / times["stock"])
            plan = r.last_plan
            info["rota_plan"] = {"fcfs_fallback": bool(plan.fcfs_fallback) if plan is not None else None,
                                 "victims": int(plan.victim_ids.size) if plan is not None else 0}
    return {
        "what": "one schedule() call on identical queues (vLLM CPU-only scheduler-test construction)",
        "waiting": waiting,
        "running": running,
        "prompt_len": prompt_len,
        "block_size": block_size,
        "repeats": repeats,
        "stock_median_us": round(statistics.median(stock_us), 1),
        "rota_median_us": round(statistics.median(rota_us), 1),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        "target_ratio": 1.5,
        "last": info,
    }
