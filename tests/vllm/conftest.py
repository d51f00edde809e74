"""Shared fixtures for the real-engine (vLLM on CPU) tests.

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so tests can reach the
scheduler object; one engine is built per configuration and shut down before the next one, because
vLLM keeps a process-wide distributed state.

Every engine comes from one factory, :func:`make_llm` (its arguments: :func:`llm_kwargs`), inside
``owned_llm(lambda: make_llm(...))``; the plugin is wired in with :func:`rota_kwargs`. A call states the
KV blocks and what else its test is about (``tensor_parallel_size=2``, ``**rota_kwargs(...)``); test modules
import them with ``from conftest import make_llm, rota_kwargs`` (this directory is not a package).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from superinfer.bench.engine.replay import owned_llm


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``tp2`` tests run one engine rank per CPU: on a runner with one usable CPU they skip with that reason
    (the daemon refuses such a layout, correctly) instead of failing."""
    if len(os.sched_getaffinity(0)) >= 2:
        return
    skip = pytest.mark.skip(reason="TP/PP=2 on CPU needs 2 usable CPUs, one per rank; this process may use 1")
    for item in items:
        if "tp2" in item.keywords:
            item.add_marker(skip)

# vLLM reads these when the engine starts; set them before any engine exists. Offline always.
VLLM_TEST_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in-process: the scheduler is inspectable
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; with num_gpu_blocks_override only that many are used
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # do not pin the pytest process to cores
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def llm_kwargs(model: str | Path, *, blocks: int, block_size: int = 32, max_model_len: int = 512,
               dtype: str = "float32", **overrides: Any) -> dict[str, Any]:
    """The ``vllm.LLM`` arguments of a test engine: ``model`` held to ``blocks`` KV blocks of ``block_size``
    tokens (vLLM's CPU attention wants a multiple of 32), greedy-reproducible (seed 0), no torch.compile
    (seconds instead of minutes); ``overrides`` added or replacing. Plain data (JSON), for subprocesses too."""
    return {"model": str(model), "dtype": dtype, "seed": 0, "block_size": block_size, "max_model_len": max_model_len,
            "num_gpu_blocks_override": blocks, "enforce_eager": True, **overrides}


def make_llm(model: str | Path, *, blocks: int, **overrides: Any) -> Any:
    """A ``vllm.LLM`` of :func:`llm_kwargs`; use it as ``owned_llm(lambda: make_llm(...))``, which shuts it down."""
    from vllm import LLM

    return LLM(**llm_kwargs(model, blocks=blocks, **overrides))


def rota_kwargs(params_file: str | Path, *, host_blocks: int, load: str | None = "async") -> dict[str, Any]:
    """The plugin wired into an engine: RotaScheduler, and DuplexKVConnector with a host pool of ``host_blocks``
    blocks reading its live params from ``params_file``; ``load``: "async", "sync", or None for the
    connector's default. Prefix caching is off, so every restored token comes from the connector. The wiring
    is the product's own (:func:`superinfer.vllm.params.plugin_wiring`, as the daemon and the benches use it)."""
    from superinfer.vllm.params import plugin_wiring

    plugin = plugin_wiring("lvf", params_file, host_blocks=host_blocks, load=load)
    return {**plugin.engine_kwargs(), "enable_prefix_caching": False}


def make_prompts(n: int) -> list[str]:
    """``n`` distinct short prompts (~25 tokens each with the tiny tokenizer)."""
    return [
        f"request {i}: the quick brown fox jumps over the lazy dog while the scheduler parks block {i * 7}"
        for i in range(n)
    ]


@dataclass
class EngineRun:
    """What one engine configuration produced on the fixed workload."""

    token_ids: list[list[int]]
    finish_reasons: list[str | None]
    num_preemptions: int  # vllm:num_preemptions counter (stock metrics)
    scheduler: Any  # the in-process scheduler object, for subclass counters
    num_gpu_blocks: int
    load_s: float
    generate_s: float
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_engine(
    model_dir: Path,
    *,
    prompts: Sequence[str],
    max_tokens: int,
    num_gpu_blocks: int = 32,
    **overrides: Any,
) -> EngineRun:
    """Start an in-process vLLM engine on CPU (:func:`make_llm`), greedy-decode ``prompts``, shut it down."""
    with _env(VLLM_TEST_ENV):
        from vllm import SamplingParams

        t0 = time.perf_counter()
        # disable_log_stats=False: keep the stock counters (vllm:num_preemptions)
        with owned_llm(lambda: make_llm(model_dir, blocks=num_gpu_blocks, disable_log_stats=False,
                                        **overrides)) as llm:
            t1 = time.perf_counter()
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
            outs = llm.generate(list(prompts), params, use_tqdm=False)
            t2 = time.perf_counter()
            metrics = {m.name: m for m in llm.get_metrics()}
            core = llm.llm_engine.engine_core
            inner = getattr(core, "engine_core", None)
            if inner is None:
                raise RuntimeError(
                    f"engine core is not in-process ({type(core).__name__}); "
                    "VLLM_ENABLE_V1_MULTIPROCESSING=0 did not take effect"
                )
            scheduler = inner.scheduler
            return EngineRun(
                token_ids=[list(o.outputs[0].token_ids) for o in outs],
                finish_reasons=[o.outputs[0].finish_reason for o in outs],
                num_preemptions=int(metrics["vllm:num_preemptions"].value),
                scheduler=scheduler,
                num_gpu_blocks=scheduler.kv_cache_config.num_blocks,
                load_s=t1 - t0,
                generate_s=t2 - t1,
            )


def cpu_async_scheduling() -> Any:
    """Engines built inside keep vLLM's asynchronous scheduling on this CPU, as vLLM configures a GPU
    (:func:`superinfer.bench.engine.asyncmode.keep_async_scheduling`)."""
    from superinfer.bench.engine.asyncmode import keep_async_scheduling

    return keep_async_scheduling()


@contextmanager
def open_engine(model_dir: Path, *, num_gpu_blocks: int, **overrides: Any) -> Iterator[Any]:
    """An in-process ``LLM`` (:func:`make_llm`) for tests that drive steps themselves (abort, live params);
    shut down after."""
    with _env(VLLM_TEST_ENV), owned_llm(lambda: make_llm(model_dir, blocks=num_gpu_blocks, **overrides)) as llm:
        yield llm


@pytest.fixture(scope="session")
def engine_cm(vllm_ok: None) -> Callable[..., Any]:
    """The :func:`open_engine` context manager (vLLM installed and supported)."""
    return open_engine


@pytest.fixture(scope="session")
def prompts_for() -> Callable[[int], list[str]]:
    """:func:`make_prompts`, as a fixture."""
    return make_prompts


@pytest.fixture(scope="session")
def run_vllm(vllm_ok: None) -> Callable[..., EngineRun]:
    """The :func:`run_engine` helper (vLLM installed and supported)."""
    return run_engine


@pytest.fixture(scope="session")
def vllm_ok() -> None:
    """Skip when no vLLM is installed; fail loudly on an unsupported version."""
    pytest.importorskip("vllm")
    from superinfer.vllm.compat import check_vllm_version

    check_vllm_version()


#: the standard workload of the real-engine tests: 40 prompts x 200 greedy tokens
WORKLOAD_PROMPTS = 40
WORKLOAD_TOKENS = 200


@pytest.fixture(scope="session")
def ample_run(run_vllm: Callable[..., EngineRun], tiny_model: Path) -> EngineRun:
    """Stock vLLM with ample KV memory on the standard workload: the reference greedy outputs.

    40 requests x ceil((~30 + 200) / 32) <= 8 blocks = 320 < 400 blocks: nothing is ever preempted.
    """
    return run_vllm(
        tiny_model,
        prompts=make_prompts(WORKLOAD_PROMPTS),
        max_tokens=WORKLOAD_TOKENS,
        num_gpu_blocks=400,
    )


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama built once per session, with no network."""
    from superinfer.daemon.backends.tiny import build_tiny_llama

    with _env(VLLM_TEST_ENV):
        return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)
