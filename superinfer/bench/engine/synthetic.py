"""Schedulers without an engine: vLLM's scheduler classes on a dummy config, as vLLM's own CPU-only
scheduler tests build them (``tests/v1/core/test_scheduler.py``: ``create_scheduler``/``create_requests``).

The model config points at a tiny local model (built with :func:`superinfer.daemon.backends.tiny.build_tiny_llama`,
no network); the KV cache is described, not allocated. Used by ``bench sched --vllm`` and by tests that
need a scheduler in a given state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager


def create_scheduler(model_dir: Path, scheduler_cls: type[Scheduler] = Scheduler, *, num_blocks: int = 10_000,
                     block_size: int = 16, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192,
                     max_model_len: int = 1024) -> Scheduler:
    """A scheduler of ``scheduler_cls`` over ``num_blocks`` KV blocks (no connector, no prefix caching)."""
    model_config = ModelConfig(model=str(model_dir), dtype="float32", seed=0, max_model_len=max_model_len)
    scheduler_config = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                       max_model_len=max_model_len, enable_chunked_prefill=True,
                                       is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=block_size, cache_dtype="auto", enable_prefix_caching=False)
    cache_config.num_gpu_blocks = num_blocks
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config, cache_config=cache_config)
    vllm_config.scheduler_config.async_scheduling = False
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1,
                                                                       head_size=64, dtype=torch.float32))],
    )
    return scheduler_cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config, block_size=block_size,
                         log_stats=False, structured_output_manager=StructuredOutputManager(vllm_config))


def create_requests(n: int, *, prompt_lens: list[int], max_tokens: int, arrival: list[float],
                    extra_args: dict[str, Any] | None = None) -> list[Request]:
    """``n`` requests with the given prompt lengths and arrival times (token ids are arbitrary)."""
    out = []
    for i in range(n):
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra_args)
        out.append(Request(request_id=f"req-{i}", prompt_token_ids=[(7 * i + j) % 500 + 1 for j in range(prompt_lens[i])],
                           sampling_params=sp, pooling_params=None, arrival_time=arrival[i]))
    return out


def fake_output(scheduler_output: Any, token: int = 11) -> ModelRunnerOutput:
    """One sampled token for every request that finished its prefill (or decoded) this step."""
    ids = list(scheduler_output.num_scheduled_tokens)
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=[[token] for _ in ids], logprobs=None,
                             prompt_logprobs_dict={}, pooler_output=[])
