"""Drive a real in-process vLLM engine step by step: replay timed arrivals, record token times.

Used by ``superinferd bench vllm`` and ``superinferd calibrate``. The engine runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the loop sees every step; wall-clock arrival times are honoured
by adding each request when its time has come (between steps). Per request we record arrival, first and
last token times and every inter-token gap, in the shape :func:`superinfer.sim.metrics.run_metrics`
expects (a :class:`superinfer.sim.engine.Trace`), so the JSON fields are those of ``bench sim``.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from superinfer.bench.engine.asyncmode import keep_async_scheduling

ENGINE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
    "VLLM_NO_USAGE_STATS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
#: bench names -> how the engine is configured
ENGINE_POLICIES = ("vllm", "vllm-priority", "lvf-paper", "lvf", "lvf-hbm")
#: RotaScheduler with the DuplexKVConnector and the core policy of that name; ``lvf-hbm``: ``lvf``'s
#: RotaScheduler without the connector (no host tier: every victim is recomputed)
ROTA_POLICIES = ("lvf-paper", "lvf", "lvf-hbm")

#: every batch size in tokens that an engine of this process has run, least recently run first. On CPU the
#: kernels are set up once per shape per *process* (a second engine in the same process runs a shape the first
#: one ran at the warm cost) and kept for the last few hundred sizes run (measured, docs/fidelity.md), so the
#: twin's ``new_shape`` term starts a run from it.
SHAPES_RUN: dict[int, None] = {}


@dataclass
class EngineSpec:
    model: str
    policy: str = "vllm"
    num_blocks: int = 4096
    block_size: int = 32
    max_model_len: int = 512
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    dtype: str = "float32"
    params: dict[str, Any] = field(default_factory=dict)  # lvf: params-file content
    host_blocks: int | None = None
    load: str | None = None  # lvf: DuplexKVConnector ``load`` ("async" | "sync"; None: the connector's default)
    calibration: str | None = None  # lvf: calibration file, the step-time model of v2's SLO token budget
    scheduler_cls: str | None = None  # overrides the policy's scheduler (calibration)
    #: vLLM's async scheduling: None vLLM's choice (on for GPUs, off on CPU); True on, kept on a CPU too
    #: (:mod:`superinfer.bench.engine.asyncmode`); False off
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        if self.policy not in ENGINE_POLICIES:
            raise ValueError(f"policy: {self.policy!r} is not one of {', '.join(ENGINE_POLICIES)}")


@contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set inside the block, as it was outside (a later engine of this
    process must not inherit one engine's scheduler settings)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def owned_llm(make: Callable[[], Any]) -> Iterator[Any]:
    """The ``vllm.LLM`` that ``make()`` builds, shut down on exit: its engine core, then its memory, then
    vLLM's distributed state (so that the next engine in this process starts clean)."""
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    llm = make()
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        cleanup_dist_env_and_memory()


@contextmanager
def open_engine(spec: EngineSpec, workdir: Path) -> Iterator[Any]:
    """An in-process ``vllm.LLM`` configured for ``spec.policy``; shut down on exit."""
    os.environ.update(ENGINE_ENV)
    from vllm import LLM

    kwargs: dict[str, Any] = {}
    if spec.policy == "vllm-priority":
        kwargs["scheduling_policy"] = "priority"
    env: dict[str, str] = {}
    if spec.policy in ROTA_POLICIES:
        from superinfer.vllm.params import plugin_wiring, write_params

        pf = workdir / "params.json"
        write_params(pf, spec.params)
        plugin = plugin_wiring(spec.policy, pf, host_blocks=spec.host_blocks, load=spec.load,
                               calibration=spec.calibration)
        kwargs.update(plugin.engine_kwargs())
        env = plugin.env
    if spec.scheduler_cls:
        kwargs["scheduler_cls"] = spec.scheduler_cls
    if spec.async_scheduling is not None:
        kwargs["async_scheduling"] = spec.async_scheduling
    keep_async = keep_async_scheduling(bool(spec.async_scheduling))
    with scoped_env(env), keep_async, owned_llm(lambda: LLM(model=spec.model, dtype=spec.dtype, seed=0, block_size=spec.block_size,
                               max_model_len=spec.max_model_len, num_gpu_blocks_override=spec.num_blocks,
                               enforce_eager=True, max_num_seqs=spec.max_num_seqs,
                               max_num_batched_tokens=spec.max_num_batched_tokens, disable_log_stats=False,
                               **kwargs)) as llm:
        _record_shapes(llm)
        yield llm


def _record_shapes(llm: Any) -> None:
    """Record every step's batch size in tokens in :data:`SHAPES_RUN`, as its most recent (the in-process
    engine core's executor)."""
    executor = llm.llm_engine.engine_core.engine_core.model_executor
    inner = executor.execute_model

    def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        size = int(scheduler_output.total_num_scheduled_tokens)
        SHAPES_RUN.pop(size, None)  # most recently run last
        SHAPES_RUN[size] = None
        return inner(scheduler_output, *args, **kwargs)

    executor.execute_model = execute_model


def scheduler_of(llm: Any) -> Any:
    return llm.llm_engine.engine_core.engine_core.scheduler


def _holding_kv(llm: Any, external_ids: list[str]) -> int:
    """How many of these requests have computed tokens (hold KV, partly prefilled) in the engine's scheduler."""
    sched, ids = scheduler_of(llm), llm.llm_engine.output_processor.external_req_ids
    return sum(1 for e in external_ids for i in ids.get(e, ())
               if getattr(sched.requests.get(i), "num_computed_tokens", 0) > 0)


@dataclass
class Replayed:
    """Token times of one replay (seconds from the replay's start)."""

    t_arr: np.ndarray
    t_first: np.ndarray
    t_end: np.ndarray
    outputs: np.ndarray
    last_token: np.ndarray
    gaps: list[float]
    gap_owner: list[int]
    window_tokens: int
    steps: int
    wall_s: float
    preemptions: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    t_shed: np.ndarray | None = None  # when a request was aborted at its first-token deadline (NaN: not)


def replay(llm: Any, arrival_s: np.ndarray, prompts: list[list[int]], outputs: np.ndarray, duration_s: float,
           drain_s: float, priorities: list[int] | None = None, max_queue_s: float = float("inf")) -> Replayed:
    """Add request i at ``arrival_s[i]`` (wall clock from now), step until all finish or the drain ends.

    ``max_queue_s``: a client's first-token deadline, the same for every policy. Between steps, a request
    still without a token that long after its arrival is aborted through vLLM's own abort path (which frees
    its KV) and recorded as shed (``Replayed.t_shed``), as a client that gave up would leave it."""
    from collections import deque

    from vllm import SamplingParams

    eng = llm.llm_engine
    n = len(prompts)
    t_first = np.full(n, np.nan)
    t_end = np.full(n, np.nan)
    last = np.full(n, np.nan)
    got = np.zeros(n, np.int64)
    gaps: list[float] = []
    owner: list[int] = []
    window_tokens = 0
    nxt = 0
    steps = 0
    index: dict[str, int] = {}
    t_shed = np.full(n, np.nan)
    shed_with_kv = 0
    waiting: deque[int] = deque()  # requests without a token yet, by arrival (= by deadline)
    t0 = time.monotonic()
    wall0 = time.time()  # Request.arrival_time's clock, at t0
    deadline = duration_s + drain_s
    while True:
        now = time.monotonic() - t0
        while nxt < n and arrival_s[nxt] <= now:
            sp = SamplingParams(temperature=0.0, max_tokens=int(outputs[nxt]), ignore_eos=True)
            # arrival_time: when it arrived, not when this loop got to it after a step (up to a step later), as
            # a server's front end stamps it; the scheduler's lag (VLT, SLO slack) counts from it, as the twin's
            rid = eng.add_request(str(nxt), {"prompt_token_ids": prompts[nxt]}, sp,
                                  arrival_time=wall0 + float(arrival_s[nxt]),
                                  priority=(priorities[nxt] if priorities else 0))
            index[str(rid)] = nxt
            index[str(nxt)] = nxt
            if max_queue_s < float("inf"):
                waiting.append(nxt)
            nxt += 1
        late = []
        while waiting and (got[waiting[0]] > 0 or now - arrival_s[waiting[0]] > max_queue_s):
            i = waiting.popleft()
            if got[i] == 0 and np.isnan(t_end[i]):
                late.append(str(i))  # the external id: vLLM maps it to its internal one
                t_shed[i] = now
        if late:
            shed_with_kv += _holding_kv(llm, late)
            eng.abort_request(late)
        if not eng.has_unfinished_requests():
            if nxt >= n or now > deadline:
                break
            time.sleep(max(0.0, min(arrival_s[nxt] - now, 0.01)))
            continue
        if now > deadline:
            break
        outs = eng.step()
        steps += 1
        t = time.monotonic() - t0
        for o in outs:
            i = index[o.request_id]
            k = len(o.outputs[0].token_ids) if o.outputs else 0
            if k > got[i]:
                if got[i] == 0:
                    t_first[i] = t
                else:
                    gaps.extend([(t - last[i]) / (k - got[i])] * (k - got[i]))
                    owner.extend([i] * (k - got[i]))
                if t <= duration_s:
                    window_tokens += int(k - got[i])
                got[i] = k
                last[i] = t
            if o.finished:
                t_end[i] = t
    wall = time.monotonic() - t0
    pre = 0
    try:
        metrics = {m.name: m for m in llm.get_metrics()}
        pre = int(metrics["vllm:num_preemptions"].value)
    except Exception:  # noqa: BLE001 - metrics are optional
        pre = 0
    return Replayed(np.asarray(arrival_s, float), t_first, t_end, got, last, gaps, owner, window_tokens, steps,
                    wall, pre, counters={"shed_with_kv": shed_with_kv}, t_shed=t_shed)


def to_trace(r: Replayed, tenant: np.ndarray, gap_tenant: np.ndarray, counters: dict[str, int], *,
             num_blocks: int, block_size: int) -> Any:
    """A :class:`superinfer.sim.engine.Trace` of a replay, for :func:`superinfer.sim.metrics.run_metrics`."""
    from superinfer.sim.engine import Trace

    return Trace(t_arr=r.t_arr, t_first=r.t_first, t_end=r.t_end, outputs=r.outputs, last_token=r.last_token,
                 rotations=np.zeros(r.t_arr.shape[0], np.int64), tenant=tenant, gaps=np.asarray(r.gaps, float),
                 gap_tenant=gap_tenant, window_tokens=r.window_tokens, iterations=r.steps, sim_s=r.wall_s,
                 wall_s=r.wall_s, counters=counters, hbm_blocks=num_blocks, t_shed=r.t_shed)


def write_mooncake(path: Path, arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> None:
    """The replayed requests as a Mooncake JSONL trace (ms timestamps), for the simulator twin."""
    with open(path, "w") as fh:
        for t, p, o in zip(arrival_s.tolist(), prompt.tolist(), output.tolist()):
            fh.write(json.dumps({"timestamp": int(round(t * 1000)), "input_length": int(p), "output_length": int(o)}) + "\n")
