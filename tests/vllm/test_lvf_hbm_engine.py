"""``lvf-hbm`` in the plugin on the real CPU engine (issue 27): RotaScheduler with the ``lvf`` core policy and
no DuplexKV connector, so every victim under KV pressure is recomputed, configured exactly as ``bench vllm``
configures it (``superinfer.bench.engine.replay.open_engine``), and leaving no setting behind for the next engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("vllm")

pytestmark = pytest.mark.timeout(600)


def test_lvf_hbm_recomputes_every_victim_and_finishes_everything(vllm_ok: None, tiny_model: Path, tmp_path: Path,
                                                                 prompts_for: Callable[[int], list[str]]) -> None:
    from vllm import SamplingParams

    from superinfer.bench.engine.replay import EngineSpec, open_engine, scheduler_of
    from superinfer.vllm import RotaScheduler

    spec = EngineSpec(model=str(tiny_model), policy="lvf-hbm", num_blocks=32, max_model_len=512,
                      params={"ttft_slo": 0.05, "tbt_slo": 0.02, "min_residency": 2})
    prompts = prompts_for(24)
    sampling = SamplingParams(max_tokens=150, temperature=0.0, ignore_eos=True)
    with open_engine(spec, tmp_path) as llm:
        sched = scheduler_of(llm)
        assert type(sched) is RotaScheduler and sched.core_policy.name == "lvf"
        assert sched.ledger is None and sched.connector is None  # no host tier at all
        outs = llm.generate(prompts, sampling)
        stats = sched.stats_dict()
    assert [len(o.outputs[0].token_ids) for o in outs] == [150] * len(prompts)
    # 24 requests of ~160 tokens in 32 blocks of 32: KV binds, and every preemption recomputes
    assert stats["scheduler"]["preemptions"] > 0 and "ledger" not in stats
    assert stats["scheduler"]["resumed"] > 0 and stats["scheduler"]["recomputed_tokens"] > 0
    assert "SUPERINFER_POLICY" not in os.environ and "SUPERINFER_PARAMS_FILE" not in os.environ
