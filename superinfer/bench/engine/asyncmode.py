"""vLLM's asynchronous scheduling on a CPU engine, for measurement and tests.

vLLM's CPU platform switches async scheduling off after the engine config has decided it
(``vllm/platforms/cpu.py``: "async scheduling is not required on CPU": the uniprocess executor runs a step inline,
so nothing overlaps and each output reaches the client one step later). Left on, the real engine loop
(``EngineCore.step_with_batch_queue``, two steps in flight), vLLM's ``AsyncScheduler`` (or the plugin's
``RotaAsyncScheduler``) and the model runner run unchanged: greedy outputs are identical. This is how the plugin's
async path is exercised without a GPU (``tests/vllm/test_async_engine.py``) and what ``bench vllm``'s
``POLICY@async_scheduling=1`` variants measure: the mode's costs, without the overlap that pays for them on a GPU.
In-process engines only (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as the benches run them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def keep_async_scheduling(on: bool = True) -> Iterator[None]:
    """Inside the block, an engine built on a CPU keeps the async scheduling its config decided (``on`` False:
    nothing changes)."""
    if not on:
        yield
        return
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.__dict__["check_and_update_config"]

    def keep(cls: type, vllm_config: Any) -> None:
        decided = vllm_config.scheduler_config.async_scheduling
        original.__func__(cls, vllm_config)
        vllm_config.scheduler_config.async_scheduling = decided

    CpuPlatform.check_and_update_config = classmethod(keep)
    try:
        yield
    finally:
        CpuPlatform.check_and_update_config = original
