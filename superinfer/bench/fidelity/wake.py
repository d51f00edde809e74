"""The arrival and wake host terms, measured in the replay loop's context (docs/fidelity.md).

A request reaches the engine in one of two ways in :func:`superinfer.bench.engine.replay.replay`: while it steps (the
loop adds it right after a step) or while it idles (the loop sleeps in slices of at most 10 ms until the
arrival). Both cost more than the same work run back to back: after a step, and more so after a sleep, the
interpreter's and the model's working sets are cold. So:

* ``arrival_s`` (:func:`arrival_after_step_s`) -- the median time of ``LLMEngine.add_request`` right after an
  engine step, while two requests decode (a prompt of the median length; the request is prefilled in the next
  step and done). The probe before (48 calls back to back) measured 85-94 us on the tiny Llama; right after a
  step the call takes 175-195 us, and in the replay of a real run (timed there) 320-380 us (docs/fidelity.md);
* ``wake_idle_s`` / ``wake_extra_s`` (:func:`wake_costs`) -- for each idle time, the median time from a
  request's arrival (the end of the idle time, slept as the replay sleeps) to the end of its prefill, minus the
  same with the request added right after the previous one finished. Besides the cold step it holds what the
  first probe (prefill only, timed after ``add_request``) left out: the sleep's overshoot and the loop's
  check (together 110-130 us from the arrival to ``add_request`` in a real run) and the cold ``add_request``
  (530-680 us after idling against 175-195 right after a step; docs/fidelity.md).

``superinferd bench fidelity --rescore FILE --remeasure host_arrival,host_wake,shape_capacity`` measures them
(and the kernel cache's capacity, :mod:`superinfer.bench.fidelity.shapes`) now (:func:`remeasure`) in place of
the recorded values.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: idle times (s) before the wake probe's requests
WAKE_IDLE_S = (0.005, 0.02, 0.05, 0.2, 1.0)
#: the replay loop's longest sleep while the engine idles (:func:`superinfer.bench.engine.replay.replay`)
SLEEP_SLICE_S = 0.01


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(3, 400, n).tolist()  # fresh tokens: no prefix-cache hit


def arrival_after_step_s(llm: Any, prompt_tokens: int, adds: int = 48) -> float:
    """Median seconds of ``add_request`` (a prompt of ``prompt_tokens``) called right after a step of two
    decoding requests, as the replay adds a request that arrived during a step; each added request is
    prefilled in the next step and done (one output token)."""
    from vllm import SamplingParams

    eng = llm.llm_engine
    rng = np.random.default_rng(1)
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    long = SamplingParams(temperature=0.0, max_tokens=3 * adds + 20, ignore_eos=True)
    for i in range(2):
        eng.add_request(f"ad{i}", {"prompt_token_ids": _tokens(rng, 64)}, long)
    for _ in range(3):
        eng.step()
    times = []
    for i in range(adds):
        prompt = {"prompt_token_ids": _tokens(rng, prompt_tokens)}
        eng.step()
        t = time.perf_counter()
        eng.add_request(f"aa{i}", prompt, one)
        times.append(time.perf_counter() - t)
        eng.step()  # its prefill
    eng.abort_request(["ad0", "ad1"])
    while eng.has_unfinished_requests():
        eng.step()
    return float(np.median(times[8:]))


def _sleep_until(eng: Any, t_end: float) -> None:
    """Idle as :func:`superinfer.bench.engine.replay.replay` does: check the engine, sleep a slice, until ``t_end``."""
    while True:
        now = time.perf_counter()
        if now >= t_end or eng.has_unfinished_requests():
            return
        time.sleep(max(0.0, min(t_end - now, SLEEP_SLICE_S)))


def wake_costs(llm: Any, prompt_tokens: int = 120, repeats: int = 8) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The first request after the engine sat idle: for each idle time of :data:`WAKE_IDLE_S`, the median time
    from its arrival (the end of the idle time) to the end of its prefill (a warm size, fresh tokens), minus
    the same request added right after the previous one finished. Returns ``(idle times, extra seconds)``."""
    from vllm import SamplingParams

    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    rng = np.random.default_rng(0)
    count = [0]

    def request(idle: float) -> float:
        count[0] += 1
        prompt = {"prompt_token_ids": _tokens(rng, prompt_tokens)}
        t = time.perf_counter() + idle  # its arrival
        _sleep_until(eng, t)
        eng.add_request(f"k{count[0]}", prompt, sp)
        while eng.has_unfinished_requests():
            eng.step()
        return time.perf_counter() - t

    for _ in range(4):
        request(0.0)  # the size is warm
    base = float(np.median([request(0.0) for _ in range(repeats)]))
    extra = []
    for idle in WAKE_IDLE_S:
        runs = [request(idle) for _ in range(repeats)]
        extra.append(max(0.0, float(np.median(runs)) - base))
    return WAKE_IDLE_S, tuple(extra)


#: the terms :func:`remeasure` can measure again, and the :class:`~superinfer.sim.host.HostCosts` fields each sets
REMEASURABLE = {"host_arrival": ("arrival_s",), "host_wake": ("wake_idle_s", "wake_extra_s"),
                "shape_capacity": ("shape_capacity",)}


def measure(llm: Any, prompt_tokens: int, terms: tuple[str, ...], max_prompt: int, max_batch: int) -> dict[str, Any]:
    """The :class:`~superinfer.sim.host.HostCosts` fields of ``terms`` (of :data:`REMEASURABLE`), measured on
    this open stock engine (``max_prompt``, ``max_batch``: its longest prompt and batch in tokens)."""
    from superinfer.bench.fidelity.shapes import shape_capacity

    unknown = [t for t in terms if t not in REMEASURABLE]
    if unknown:
        raise ValueError(f"remeasure: {', '.join(unknown)} not one of {', '.join(REMEASURABLE)}")
    out: dict[str, Any] = {}
    if "host_arrival" in terms:
        out["arrival_s"] = arrival_after_step_s(llm, prompt_tokens)
    if "host_wake" in terms:
        out["wake_idle_s"], out["wake_extra_s"] = wake_costs(llm)
    if "shape_capacity" in terms:  # last: it runs a few hundred new sizes
        out["shape_capacity"] = shape_capacity(llm, max_prompt, max_batch)["shape_capacity"]
    return out


def remeasure(spec: Any, prompt_tokens: int, terms: tuple[str, ...], workdir: Any) -> dict[str, Any]:
    """:func:`measure` on a fresh stock engine of ``spec``'s settings (an
    :class:`~superinfer.bench.engine.replay.EngineSpec`; its policy and blocks are not used)."""
    from superinfer.bench.engine.replay import EngineSpec, open_engine

    stock = EngineSpec(**{**spec.__dict__, "policy": "vllm", "num_blocks": 128})
    with open_engine(stock, workdir) as llm:
        return measure(llm, prompt_tokens, terms, spec.max_model_len - 2, spec.max_num_batched_tokens)
