"""The plugin under vLLM's asynchronous scheduling (its default on GPUs), on the real CPU engine.

``--scheduler-cls superinfer.vllm.RotaScheduler`` gives :class:`~superinfer.vllm.RotaAsyncScheduler` when vLLM
schedules asynchronously; vLLM's engine then keeps two steps in flight, so victims are chosen and parked while
their last step still runs. Specified here, with the engines built by :func:`conftest.cpu_async_scheduling`
(vLLM's CPU platform would switch the mode off):

* rotation stays lossless: the standard workload gives token for token the outputs of stock vLLM with ample
  memory, while requests are parked with a step in flight and loaded back, none recomputed;
* nothing is lost or stuck, both tiers are empty at the end;
* ``lvf-hbm`` (no host tier) recomputes its victims and is lossless too;
* the step-time fit pairs each output with its own step.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm")

from conftest import WORKLOAD_PROMPTS, WORKLOAD_TOKENS, cpu_async_scheduling, rota_kwargs  # type: ignore[import-not-found]  # noqa: E402,E501

pytestmark = pytest.mark.timeout(900)

BLOCKS = 32
HOST_BLOCKS = 1024
# as test_rota_engine.py: tiny SLOs and v2's guards off, so that the plugin rotates as often as it can
ROTATE_HARD = {"ttft_slo": 0.05, "tbt_slo": 0.02, "delta_f": 0.0, "min_residency": 2, "b_xfer": 256,
               "slack_gate_s": -3600.0, "rotation_margin_s": 0.0}


def _params(tmp: Path, policy: str = "lvf") -> Path:
    from superinfer.vllm.params import write_params

    path = tmp / f"{policy}.json"
    write_params(path, ROTATE_HARD)
    return path


@pytest.fixture(scope="module")
def rotated_async(run_vllm: Callable[..., Any], prompts_for: Callable[[int], list[str]], tiny_model: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Any:
    from superinfer.vllm import kvworker

    params = _params(tmp_path_factory.mktemp("async"))
    with cpu_async_scheduling():
        run = run_vllm(tiny_model, prompts=prompts_for(WORKLOAD_PROMPTS), max_tokens=WORKLOAD_TOKENS,
                       num_gpu_blocks=BLOCKS, async_scheduling=True, **rota_kwargs(params, host_blocks=HOST_BLOCKS))
    run.extra["worker"] = kvworker.CLOSED[-1]
    return run


def test_the_documented_class_path_gives_the_async_scheduler(rotated_async: Any) -> None:
    from superinfer.vllm import RotaAsyncScheduler, RotaScheduler

    s = rotated_async.scheduler
    assert type(s) is RotaAsyncScheduler and isinstance(s, RotaScheduler)
    assert s.vllm_config.scheduler_config.async_scheduling and s.vllm_config.max_concurrent_batches == 2
    sync = SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=False))
    assert type(RotaScheduler.__new__(RotaScheduler, vllm_config=sync)) is RotaScheduler


def test_rotation_under_async_scheduling_is_lossless(rotated_async: Any, ample_run: Any) -> None:
    s = rotated_async.scheduler
    st, led = s.stats, s.ledger.stats
    print(dict(st), dict(led))
    assert st["rotations"] >= 50 and led["parks"] >= st["rotations"], (st, led)
    # victims were parked while their last step was still running, and came back from the host
    assert st["preempted_in_flight"] >= 50, st
    assert led["loads"] > 0 and st["resumed"] >= led["loads"] and led["sync_blocks"] > 0
    assert st["recomputed_tokens"] == 0 and led["recompute_fallbacks"] == 0, (st, led)
    assert led["loaded_tokens"] > 30 * led["loads"]
    assert rotated_async.token_ids == ample_run.token_ids
    assert [len(t) for t in rotated_async.token_ids] == [WORKLOAD_TOKENS] * WORKLOAD_PROMPTS


def test_nothing_lost_and_both_tiers_empty_at_the_end(rotated_async: Any) -> None:
    s = rotated_async.scheduler
    assert rotated_async.finish_reasons == ["length"] * WORKLOAD_PROMPTS
    assert not s.requests and not s.running and not s.waiting and len(s.table) == 0
    assert not s.deferred_frees and s.kv_cache_manager.block_pool.get_num_free_blocks() == BLOCKS - 1
    assert s.ledger.free == s.ledger.capacity == HOST_BLOCKS and not s.ledger.recs
    w = rotated_async.extra["worker"]
    assert w.get("park_failures", 0) == 0 and w.get("load_failures", 0) == 0
    assert s.stats["plan_errors"] == 0


def test_the_plan_counts_the_blocks_a_deferred_free_returns() -> None:
    """Under async scheduling a victim's blocks reach the pool one or two steps after the plan that parked it;
    the plans in between count them as free, or they would choose more victims for room already coming."""
    from collections import deque

    from superinfer.vllm.mirror import pool_free

    pool = SimpleNamespace(get_num_free_blocks=lambda: 3)
    sched = SimpleNamespace(kv_cache_manager=SimpleNamespace(block_pool=pool), deferred_frees=deque())
    assert pool_free(sched) == 3
    sched.deferred_frees.extend([(7, ["b1", "b2"]), (8, ["b3"])])
    assert pool_free(sched) == 6
    del sched.deferred_frees  # a vLLM without deferred frees: the pool's count
    assert pool_free(sched) == 3


def test_the_step_fit_times_every_step_once(rotated_async: Any) -> None:
    fit = rotated_async.scheduler.step_fit
    # every step that computed something was paired with its output (LLM.generate may stop with an empty
    # step of the drained engine still queued)
    assert all(sample is None for _, _, sample in fit._open), fit._open
    assert len(fit.samples) >= 64 and fit.skipped <= 2, fit.stats()
    assert all(x.measured_s > 0 for x in fit.samples)


def test_lvf_hbm_under_async_scheduling_recomputes_and_is_lossless(
        run_vllm: Callable[..., Any], prompts_for: Callable[[int], list[str]], tiny_model: Path, ample_run: Any,
        tmp_path: Path) -> None:
    from superinfer.vllm.params import plugin_wiring

    wiring = plugin_wiring("lvf-hbm", _params(tmp_path, "lvf-hbm"))
    assert wiring.kv_transfer_config is None
    with cpu_async_scheduling(), _env(wiring.env):
        run = run_vllm(tiny_model, prompts=prompts_for(WORKLOAD_PROMPTS), max_tokens=WORKLOAD_TOKENS,
                       num_gpu_blocks=BLOCKS, async_scheduling=True, **wiring.engine_kwargs())
    st = run.scheduler.stats
    assert st["preemptions"] > 0 and st["recomputed_tokens"] > 0, st
    assert run.token_ids == ample_run.token_ids


def _env(values: dict[str, str]) -> Any:
    from conftest import _env as env  # type: ignore[import-not-found]

    return env(values)
