"""Measure an engine's host-side terms for the twin (:class:`superinfer.sim.engine.HostCosts`).

A calibration (``superinferd calibrate``) prices a step of *stock* vLLM: scheduler, forward, sampling and
output processing. What a policy adds on top, and what the replay loop spends between steps, is measured
here on the same engine settings, apart from the runs the twin is compared with:

* ``step_s`` -- the median step of a steady two-request decode under the policy minus the same under stock
  vLLM (the plugin's table refresh and the KV connector's hooks; its quiet steps skip the plan);
* ``plan_s`` -- the same difference with a request that cannot be admitted waiting, so every step of the
  plugin plans, minus ``step_s``;
* ``arrival_s`` -- the median time of ``LLMEngine.add_request`` for a prompt of the median length (input
  processing, serial with the engine loop), the same for every policy;
* ``new_shape_s`` -- a prefill of a length the engine has not run before, minus the same prefill again
  (median over eight lengths): on CPU kernels are set up per batch shape, and the calibration fit is warm;
* the KV copy time per block (:func:`copy_s_per_block`): the connector's CPU copy path (one ``copy_`` per
  layer, K and V, and block, as DuplexKV's torch backend runs it) timed on the model's block shape.

Each difference is a median of per-step times over the same batch shape, so the forward pass cancels.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from superinfer.sim.engine import HostCosts
from superinfer.vllm.replay import ROTA_POLICIES, EngineSpec, open_engine

_DECODE_STEPS = 160
_PROMPT = 300  # tokens of each decoding request


def _prompt(i: int, n: int) -> list[int]:
    return [(13 * i + j) % 400 + 3 for j in range(n)]


def _median_step(llm: Any, waiting_prompt: int | None) -> float:
    """Median wall time of ``engine.step()`` while two requests decode (and one waits, if asked)."""
    from vllm import SamplingParams

    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=_DECODE_STEPS + 20, ignore_eos=True)
    wp = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    for i in range(2):
        eng.add_request(f"h{i}", {"prompt_token_ids": _prompt(i, _PROMPT)}, sp)
    for _ in range(3):
        eng.step()  # prefills and the first decode
    if waiting_prompt:
        eng.add_request("hw", {"prompt_token_ids": _prompt(7, waiting_prompt)}, wp)
    times = []
    for _ in range(_DECODE_STEPS):
        t = time.perf_counter()
        eng.step()
        times.append(time.perf_counter() - t)
    for rid in ("h0", "h1", "hw"):
        eng.abort_request([rid])
    while eng.has_unfinished_requests():
        eng.step()
    return float(np.median(times[20:]))


def _arrival_s(llm: Any, prompt_tokens: int) -> float:
    from vllm import SamplingParams

    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    times = []
    for i in range(48):
        t = time.perf_counter()
        eng.add_request(f"a{i}", {"prompt_token_ids": _prompt(i, prompt_tokens)}, sp)
        times.append(time.perf_counter() - t)
    eng.abort_request([f"a{i}" for i in range(48)])
    while eng.has_unfinished_requests():
        eng.step()
    return float(np.median(times[8:]))


def copy_s_per_block(model_dir: str, block_size: int, dtype: str = "float32", blocks: int = 64) -> float:
    """Median seconds to copy one KV block between two CPU tensors the way DuplexKV's torch backend does
    (a ``copy_`` per layer, K and V), for the model in ``model_dir`` (its ``config.json``)."""
    import json

    import torch

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    layers = int(cfg["num_hidden_layers"])
    kv_heads = int(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    tdtype = getattr(torch, dtype)
    row = block_size * kv_heads * head_dim
    src = [torch.randn(blocks * 2, row).to(tdtype) for _ in range(2 * layers)]
    dst = [torch.zeros(blocks * 2, row, dtype=tdtype) for _ in range(2 * layers)]
    order = np.random.default_rng(0).permutation(blocks * 2)[:blocks].tolist()
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for s_, d_ in zip(src, dst):
            for i, b in enumerate(order):
                d_[i].copy_(s_[b])
        runs.append((time.perf_counter() - t) / blocks)
    return float(np.median(runs[2:]))


_FRESH_LENGTHS = (137, 211, 263, 307, 177, 389, 97, 331)  # prompt lengths no other probe runs


def _new_shape_s(llm: Any) -> float:
    from vllm import SamplingParams

    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)

    def prefill(n: int, tag: str) -> float:
        eng.add_request(tag, {"prompt_token_ids": _prompt(n, n)}, sp)
        t = time.perf_counter()
        while eng.has_unfinished_requests():
            eng.step()
        return time.perf_counter() - t

    extra = [prefill(n, f"s{n}") - prefill(n, f"s{n}b") for n in _FRESH_LENGTHS]
    return max(0.0, float(np.median(extra)))


def measure_host_costs(spec: EngineSpec, policies: list[str], prompt_tokens: int,
                       workdir: Path) -> dict[str, dict[str, Any]]:
    """Per policy: ``{"host": HostCosts, "median_step_s": {...}}``, measured on engines like ``spec``.

    The blocked probe gives the engine just enough KV blocks for the two decoding requests to finish, so a
    third request whose prompt is longer than what is left waits the whole probe; no policy may rotate
    (``max_rotations`` 0), so every step has the same batch (``spec.num_blocks`` is not used)."""
    bs = spec.block_size
    per_req = -(-(_PROMPT + _DECODE_STEPS + 24) // bs)
    tight = 2 * per_req + 2  # and vLLM's null block, and one spare
    waiting_prompt = (tight - 1 - 2 * -(-_PROMPT // bs)) * bs + 1  # one token more than the free blocks hold
    if waiting_prompt >= spec.max_model_len:
        raise ValueError(f"host probe: needs max_model_len > {waiting_prompt}, got {spec.max_model_len}")
    params = {**spec.params, "max_rotations": 0}
    steps: dict[str, dict[str, float]] = {}
    arrival = shape = 0.0
    for policy in dict.fromkeys(["vllm", *policies]):
        free = EngineSpec(**{**spec.__dict__, "policy": policy, "num_blocks": 4 * per_req + 8, "params": params})
        blocked = EngineSpec(**{**spec.__dict__, "policy": policy, "num_blocks": tight, "params": params})
        with open_engine(free, workdir) as llm:
            quiet = _median_step(llm, None)
            if policy == "vllm":
                arrival = _arrival_s(llm, prompt_tokens)
                shape = _new_shape_s(llm)
        with open_engine(blocked, workdir) as llm:
            waiting = _median_step(llm, waiting_prompt)
        steps[policy] = {"quiet": quiet, "waiting": waiting}
    out: dict[str, dict[str, Any]] = {}
    base = steps["vllm"]
    for policy in policies:
        st = steps[policy]
        step_s = max(0.0, st["quiet"] - base["quiet"]) if policy in ROTA_POLICIES else 0.0
        plan_s = max(0.0, st["waiting"] - base["waiting"] - step_s) if policy in ROTA_POLICIES else 0.0
        out[policy] = {"host": HostCosts(step_s=step_s, plan_s=plan_s, arrival_s=arrival, new_shape_s=shape),
                       "median_step_s": {"policy": st, "stock": base}}
    return out
