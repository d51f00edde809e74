"""Measure an engine's host-side terms for the twin (:class:`superinfer.sim.engine.HostCosts`).

A calibration (``superinferd calibrate``) prices a step of *stock* vLLM: scheduler, forward, sampling and
output processing. What a policy adds on top, and what the replay loop spends between steps, is measured
here on the same engine settings, apart from the runs the twin is compared with:

* ``step_s`` -- the median step of a steady two-request decode under the policy minus the same under stock
  vLLM (the plugin's table refresh and the KV connector's hooks; its quiet steps skip the plan). The same
  probe (:func:`quiet_step_s`), run again around each compared run, measures the host's speed then;
* ``waiting_s`` -- the same probe with a request waiting that cannot be admitted, minus the quiet step
  (:func:`measure_host_costs`); for the plugin's policies replaced by what its own steps show in a probe
  replay (:func:`superinfer.bench.fidelity.steps.waiting_line`: the probe's one waiting request soon stops
  being a candidate, a queue of a real run does not);
* ``plan_s`` + ``plan_per_live_s`` x live requests -- the plugin's own timing of its plans (plan and apply,
  ``superinfer.vllm.stats.add_plan_time``) over a probe replay of the same workload on a seed no compared run uses,
  as a least-squares line in the number of live requests (:func:`plan_line`);
* ``arrival_s`` -- the median time of ``LLMEngine.add_request`` for a prompt of the median length right after
  a step, as the replay adds a request (input processing, serial with the engine loop), the same for every
  policy (:func:`superinfer.bench.fidelity.wake.arrival_after_step_s`);
* ``new_shape_s`` -- a prefill of a length the engine has not run before, minus the same prefill again
  (median over eight lengths): on CPU kernels are set up per batch shape, and the calibration fit is warm;
* ``output_s`` + ``output_per_seq_s`` x sequences -- the engine's output processing after the scheduler's
  step (:func:`output_costs`: a step of ``LLMEngine.step()`` and the replay loop's reading of its outputs,
  minus the calibrated part, from ``schedule()`` to the end of ``update_from_output``, of the same step;
  medians per batch size of steady decodes, a least-squares line through them);
* ``wake_idle_s`` / ``wake_extra_s`` -- a request's arrival to its first token after the engine sat idle
  (slept as the replay sleeps), minus the same back to back, at a few idle times
  (:func:`superinfer.bench.fidelity.wake.wake_costs`);
* ``shape_capacity`` is measured after the runs (:func:`superinfer.bench.fidelity.probes.measure_shape_capacity`):
  its probe runs a few hundred new sizes, and the runs should not start from a kernel cache it filled;
* the KV copy time per block (:func:`copy_s_per_block`): the connector's CPU copy path (one ``copy_`` per
  layer, K and V, and block, as DuplexKV's torch backend runs it) timed on the model's block shape.

Each step difference is a median of per-step times over the same batch shape, so the forward pass cancels.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from superinfer.bench.engine.replay import ROTA_POLICIES, EngineSpec, open_engine
from superinfer.bench.fidelity.wake import arrival_after_step_s, wake_costs
from superinfer.sim.engine import HostCosts

_DECODE_STEPS = 160
_PROMPT = 300  # tokens of each decoding request


def _prompt(i: int, n: int) -> list[int]:
    return [(13 * i + j) % 400 + 3 for j in range(n)]


def _median_step(llm: Any, waiting_prompt: int | None = None) -> float:
    """Median wall time of ``engine.step()`` while two requests decode (and one waits, if asked)."""
    from vllm import SamplingParams

    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=_DECODE_STEPS + 20, ignore_eos=True)
    for i in range(2):
        eng.add_request(f"h{i}", {"prompt_token_ids": _prompt(i, _PROMPT)}, sp)
    for _ in range(3):
        eng.step()  # prefills and the first decode
    if waiting_prompt:
        eng.add_request("hw", {"prompt_token_ids": _prompt(7, waiting_prompt)},
                        SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    times = []
    for _ in range(_DECODE_STEPS):
        t = time.perf_counter()
        eng.step()
        times.append(time.perf_counter() - t)
    eng.abort_request(["h0", "h1", "hw"])
    while eng.has_unfinished_requests():
        eng.step()
    return float(np.median(times[20:]))


def probe_fits(num_blocks: int, block_size: int, max_model_len: int) -> bool:
    """Whether the speed probe's two requests fit an engine of these settings (with vLLM's null block)."""
    tokens = _PROMPT + _DECODE_STEPS + 20
    return tokens <= max_model_len and 2 * -(-tokens // block_size) <= num_blocks - 1


#: the speed probe's steady step: two decodes at this context each (the median step of ``_median_step``)
PROBE_CONTEXT = _PROMPT + 3 + 20 + (_DECODE_STEPS - 20) // 2


def _repeated_step(llm: Any, repeats: int, waiting_prompt: int | None = None) -> float:
    """The median of ``repeats`` probes of :func:`_median_step` on this open engine."""
    return float(np.median([_median_step(llm, waiting_prompt) for _ in range(repeats)]))


def quiet_step_s(llm: Any, repeats: int = 3) -> float:
    """The speed probe: median step of a steady two-request decode on this open engine (seconds), the median
    of ``repeats`` probes. Its KV (two requests of ``_PROMPT`` + ``_DECODE_STEPS`` tokens) must fit in the
    engine's blocks."""
    return _repeated_step(llm, repeats)


def least_squares_line(n: float, sx: float, sxx: float, sy: float, sxy: float) -> tuple[float, float]:
    """``(a, b)`` of the least-squares line ``y = a + b x`` from the sums of ``n`` points; ``(0, 0)`` with no
    point; ``b = 0`` when ``x`` never varied. A negative slope is clipped to 0 (``a`` is then the mean), a
    negative intercept to 0: both are costs."""
    if n <= 0:
        return 0.0, 0.0
    var = sxx - sx * sx / n
    b = (sxy - sx * sy / n) / var if var > 1e-9 * max(1.0, sxx) else 0.0
    if b < 0:
        b = 0.0
    return max(0.0, (sy - b * sx) / n), b


def plan_line(sums: dict[str, int]) -> tuple[float, float]:
    """``(a, b)`` seconds of the line ``plan time = a + b * live requests`` from the plugin's sums
    (``bench.PLAN_SUMS``), as :func:`least_squares_line`."""
    n = sums.get("plan_timed", 0)
    if n <= 0:
        return 0.0, 0.0
    a, b = least_squares_line(n, *(float(sums[k]) for k in ("plan_live", "plan_live_sq", "plan_ns", "plan_ns_x_live")))
    return a * 1e-9, b * 1e-9


#: the twin's ``host_kv`` fields per timed connector operation (``kvworker.KV_KINDS``): (fixed, per block)
KV_FIELDS = {"park": ("park_call_s", "park_block_s"), "load": ("load_s", "load_block_s"),
             "sync": ("sync_call_s", "sync_block_s")}


def kv_lines(sums: dict[str, int]) -> dict[str, float]:
    """The ``host_kv`` fields of :class:`~superinfer.sim.host.HostCosts` (seconds) from the KV worker's cost
    sums (:mod:`superinfer.vllm.kvworker`): per operation, the least-squares line of its time in blocks.
    An operation the probe never ran costs 0."""
    out: dict[str, float] = {}
    for kind, (fixed, per_block) in KV_FIELDS.items():
        a, b = least_squares_line(*(float(sums.get(f"{kind}_{k}", 0)) for k in ("n", "x", "xx", "ns", "ns_x")))
        out[fixed], out[per_block] = a * 1e-9, b * 1e-9
    return out


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


_OUTPUT_BATCHES = (1, 2, 4, 8, 16)
#: waiting probes per engine (their median is ``host_waiting``'s step)
WAITING_REPEATS = 3


def output_costs(spec: EngineSpec, workdir: Path) -> tuple[float, float]:
    """``(a, b)`` seconds: the engine's per-step time outside the calibrated scheduler step, as the line
    ``a + b * sequences`` through the median difference at each batch size of steady decodes."""
    from vllm import SamplingParams

    from superinfer.bench.engine import calibrate

    timed = EngineSpec(**{**spec.__dict__, "policy": "vllm", "num_blocks": 512,
                          "scheduler_cls": "superinfer.bench.engine.calibrate.TimingScheduler"})
    sp = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)
    medians = []
    with open_engine(timed, workdir) as llm:
        eng = llm.llm_engine
        for rep in range(2):  # the first pass meets every shape once (first-shape costs): dropped
            for b in _OUTPUT_BATCHES:
                diffs = []
                for i in range(b):
                    eng.add_request(f"o{rep}.{b}.{i}", {"prompt_token_ids": _prompt(i, 64)}, sp)
                while eng.has_unfinished_requests():
                    n0 = len(calibrate.SAMPLES)
                    t = time.perf_counter()
                    outs = eng.step()
                    for o in outs:  # what the replay loop reads of every output
                        _ = len(o.outputs[0].token_ids) if o.outputs else 0
                    outer = time.perf_counter() - t
                    if len(calibrate.SAMPLES) == n0 + 1 and calibrate.SAMPLES[-1][1] == b:
                        diffs.append(outer - calibrate.SAMPLES[-1][3])
                if rep == 1 and diffs:
                    medians.append((b, float(np.median(diffs))))
    calibrate.SAMPLES.clear()
    x, y = np.array([m[0] for m in medians], float), np.array([m[1] for m in medians])
    if not y.size:
        return 0.0, 0.0
    slope = max(0.0, float(np.polyfit(x, y, 1)[0])) if x.size > 1 else 0.0
    return max(0.0, float(np.mean(y - slope * x))), slope  # the intercept again if the slope was clipped


def measure_host_costs(spec: EngineSpec, policies: list[str], prompt_tokens: int,
                       workdir: Path) -> dict[str, dict[str, Any]]:
    """Per policy: ``{"host": HostCosts, "median_step_s": {"policy": quiet step, "waiting": the same with a
    request waiting that cannot be admitted, "stock": stock's quiet step}}``, measured on engines like
    ``spec`` (``spec.num_blocks`` is not used). The plan terms are left at 0: they come from a probe replay
    (:func:`plan_line`).

    The waiting probe gives the engine just enough KV blocks for the two decoding requests to finish, so a
    third request whose prompt is longer than what is left waits the whole probe; no policy may rotate
    (``max_rotations`` 0), so every step has the same batch. Its difference to the quiet step is
    ``waiting_s``: stock vLLM tries the head of its waiting queue every step (a prefix-cache lookup and a
    failed allocation), the plugin checks that the step only serves its batch."""
    bs = spec.block_size
    per_req = -(-(_PROMPT + _DECODE_STEPS + 24) // bs)
    tight = 2 * per_req + 2  # and vLLM's null block, and one spare
    waiting_prompt = (tight - 1 - 2 * -(-_PROMPT // bs)) * bs + 1  # one token more than the free blocks hold
    if waiting_prompt >= spec.max_model_len:
        raise ValueError(f"host probe: needs max_model_len > {waiting_prompt}, got {spec.max_model_len}")
    params = {**spec.params, "max_rotations": 0}
    steps: dict[str, dict[str, float]] = {}
    arrival = shape = 0.0
    wake: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    for policy in dict.fromkeys(["vllm", *policies]):
        free = EngineSpec(**{**spec.__dict__, "policy": policy, "num_blocks": 4 * per_req + 8})
        blocked = EngineSpec(**{**spec.__dict__, "policy": policy, "num_blocks": tight, "params": params})
        with open_engine(free, workdir) as llm:
            quiet = quiet_step_s(llm)
            if policy == "vllm":
                shape = _new_shape_s(llm)
                arrival, wake = arrival_after_step_s(llm, prompt_tokens), wake_costs(llm)
        with open_engine(blocked, workdir) as llm:
            # the median of three probes: one probe of stock vLLM measured 0, 50, 280 and 608 us (docs/fidelity.md)
            steps[policy] = {"policy": quiet, "waiting": _repeated_step(llm, WAITING_REPEATS, waiting_prompt)}
    out_a, out_b = output_costs(spec, workdir)
    out: dict[str, dict[str, Any]] = {}
    for policy in policies:
        st = steps[policy]
        step_s = max(0.0, st["policy"] - steps["vllm"]["policy"]) if policy in ROTA_POLICIES else 0.0
        out[policy] = {"host": HostCosts(step_s=step_s, arrival_s=arrival, new_shape_s=shape, output_s=out_a,
                                         output_per_seq_s=out_b, waiting_s=max(0.0, st["waiting"] - st["policy"]),
                                         wake_idle_s=wake[0], wake_extra_s=wake[1]),
                       "median_step_s": {**st, "stock": steps["vllm"]["policy"]}}
    return out
