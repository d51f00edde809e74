"""How many batch sizes the engine keeps set up: the twin's ``shape_capacity`` (docs/fidelity.md).

On CPU, vLLM runs every linear layer through oneDNN, which builds a kernel per batch size in tokens and caches
it; a size run before costs the warm step, a size never run ``new_shape_s`` more. The cache is finite: run a
few hundred other sizes, and a size run before costs a new size's set-up again (measured on the tiny Llama: a
size run before was warm after 200 other new sizes, +0.1-0.7 ms; after 250 or more it cost 2.3-3.1 ms more
than warm, a new size 1.7-2.0 ms). :func:`shape_capacity` measures that count on the open engine.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: the distances (other sizes run since a size last ran) at which :func:`shape_capacity` tests a size again
DISTANCES = tuple(range(96, 417, 16))


def _fresh(lo: int, hi: int, used: set[int], n: int) -> list[int]:
    out = [s for s in range(lo, hi) if s not in used][:n]
    used.update(out)
    return out


def shape_capacity(llm: Any, max_prompt: int, max_batch: int) -> dict[str, Any]:
    """The number of batch sizes the engine keeps set up (0: no eviction seen up to the last distance).

    Targets -- one per distance of :data:`DISTANCES`, sizes this process has not run -- are run twice (set
    up and warm); then sizes never run before (two prompts of up to ``max_prompt`` tokens in one step, at most
    ``max_batch`` tokens) are run one after the other, and at each distance ``d`` one target is run again,
    when ``d`` other sizes have run since it last ran. A target is cold when its step costs more than half a
    new size's set-up (its first run minus its warm run, the median over targets) above its warm run. The
    capacity is the middle between the distance of the first of two cold targets in a row and the one before.
    Returns ``{"shape_capacity", "distances", "extra_s", "new_extra_s"}``, or ``{"shape_capacity": 0,
    "skipped": why}`` where the engine's settings leave too few sizes to run."""
    from vllm import SamplingParams

    from superinfer.bench.engine.replay import SHAPES_RUN

    eng = llm.llm_engine
    sp = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    rng = np.random.default_rng(2)
    count = [0]

    def run(size: int) -> float:
        for part in ([size] if size <= max_prompt else [size // 2, size - size // 2]):
            count[0] += 1
            eng.add_request(f"z{count[0]}", {"prompt_token_ids": rng.integers(3, 400, part).tolist()}, sp)
        t = time.perf_counter()
        while eng.has_unfinished_requests():
            eng.step()
        return time.perf_counter() - t

    m = len(DISTANCES)
    used = set(SHAPES_RUN)
    targets = _fresh(24, max_prompt, used, m)
    need = DISTANCES[-1] - (m - 1)
    news = _fresh(max_prompt + 1, min(2 * max_prompt, max_batch) + 1, used, need)
    if len(targets) < m or len(news) < need:
        return {"shape_capacity": 0, "skipped": f"needs {m} sizes up to {max_prompt} tokens and {need} from "
                                                f"{max_prompt + 1} to {min(2 * max_prompt, max_batch)} not run yet"}
    first = [run(s) for s in targets]
    warm = [run(s) for s in targets]
    # target j last ran in the warm pass; since then the m - 1 - j targets after it and the j tested before it
    extra, k = [], 0
    for j, d in enumerate(DISTANCES):
        while k < d - (m - 1):
            run(news[k])
            k += 1
        extra.append(run(targets[j]) - warm[j])
    new_extra = float(np.median(np.subtract(first, warm)))
    cold = [e > 0.5 * new_extra for e in extra]
    capacity = 0
    for j in range(m - 1):
        if cold[j] and cold[j + 1]:
            step = DISTANCES[1] - DISTANCES[0]
            capacity = (DISTANCES[j] - step // 2) if j else DISTANCES[0]
            break
    return {"shape_capacity": capacity, "distances": list(DISTANCES), "extra_s": extra, "new_extra_s": new_extra}
