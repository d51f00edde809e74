"""RotaScheduler + DuplexKVConnector on a real vLLM engine (CPU, tiny Llama, 32 KV blocks).

* lossless rotation: 40 greedy requests x 200 tokens give token-for-token the outputs of stock vLLM
  with ample memory, while the scheduler rotates requests out proactively hundreds of times and every
  resume loads its parked KV (no parked token is recomputed);
* nothing is lost or stuck; aborting requests mid-rotation frees both tiers;
* a change of the params file changes the scheduler's ranking without a restart;
* the same under vLLM's default multiprocess mode (scheduler and worker in different processes).

SLOs are made tiny through the params file so that lag, hence rotation, builds up within a short run.
No assertion depends on timing: what rotates when may vary, the outputs and the accounting may not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

from conftest import VLLM_TEST_ENV, llm_kwargs, rota_kwargs  # type: ignore[import-not-found]  # noqa: E402

from superinfer.core import Phase  # noqa: E402

pytestmark = pytest.mark.timeout(900)

NUM_PROMPTS = 40
MAX_TOKENS = 200
BLOCKS = 32
HOST_BLOCKS = 1024  # ample: the lossless run must never need the recompute fallback
# Params that make the plugin rotate as often as it can: tight SLOs, and v2's guards off (slack gate, margin).
ROTATE_HARD = {"ttft_slo": 0.05, "tbt_slo": 0.02, "delta_f": 0.0, "min_residency": 2, "b_xfer": 256,
               "slack_gate_s": -3600.0, "rotation_margin_s": 0.0}


@pytest.fixture(scope="module")
def params_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from superinfer.vllm.params import write_params

    path = tmp_path_factory.mktemp("params") / "params.json"
    write_params(path, ROTATE_HARD)
    return path


@pytest.fixture(scope="module")
def rotated(run_vllm: Callable[..., Any], prompts_for: Callable[[int], list[str]], tiny_model: Path,
            params_file: Path) -> Any:
    from superinfer.vllm import kvworker

    run = run_vllm(tiny_model, prompts=prompts_for(NUM_PROMPTS), max_tokens=MAX_TOKENS, num_gpu_blocks=BLOCKS,
                   **rota_kwargs(params_file, host_blocks=HOST_BLOCKS))
    run.extra["worker"] = kvworker.CLOSED[-1]
    return run


def test_classes_load_from_their_documented_paths(rotated: Any) -> None:
    from superinfer.vllm import DuplexKVConnector, RotaScheduler

    assert type(rotated.scheduler) is RotaScheduler
    assert type(rotated.scheduler.connector) is DuplexKVConnector


def test_rotation_is_lossless(rotated: Any, ample_run: Any) -> None:
    s = rotated.scheduler
    st, led = s.stats, s.ledger.stats
    # heavy, real rotation: proactive (discretionary) victims, each parked and loaded back
    assert st["rotations"] >= 100, st
    assert st["pressure_steps"] > 0 and led["parks"] >= st["rotations"]
    assert led["loads"] > 0 and st["resumed"] >= led["loads"]
    assert led["sync_blocks"] > 0  # eager syncs happened, so some parks copied only a tail
    # when every request runs, fits and is synced the plan is skipped (core.nothing_to_plan), losslessly
    assert st["quiet_steps"] > 0, st
    # and between plans that decided nothing, steps serve the batch unplanned (core.gate), losslessly too
    assert st["held_steps"] > 0, st
    assert led["swap_out_blocks"] < led["swap_in_blocks"]
    # no parked block was recomputed, and no victim fell back to recompute
    assert st["recomputed_tokens"] == 0, st
    assert led["recompute_fallbacks"] == 0 and led["fallback_tokens"] == 0, led
    assert led["loaded_tokens"] > 30 * led["loads"]  # whole parked contexts come back
    # lossless: token for token what stock vLLM produces with ample memory
    assert rotated.token_ids == ample_run.token_ids
    assert [len(t) for t in rotated.token_ids] == [MAX_TOKENS] * NUM_PROMPTS


def test_nothing_lost_and_both_tiers_empty_at_the_end(rotated: Any) -> None:
    s = rotated.scheduler
    assert rotated.finish_reasons == ["length"] * NUM_PROMPTS
    assert not s.requests and not s.running and not s.waiting and len(s.table) == 0
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == BLOCKS - 1
    assert s.ledger.free == s.ledger.capacity == HOST_BLOCKS and not s.ledger.recs
    w = rotated.extra["worker"]
    # vLLM tells the worker which requests finished with the *next* step; LLM.generate stops stepping when
    # the last request finishes, so only the last step's finishers may still hold host blocks here (the
    # driven test below steps on and checks the worker pool is then completely free).
    assert w["pool_blocks"] == HOST_BLOCKS and w["requests_with_host_blocks"] <= 4, w
    assert w.get("park_failures", 0) == 0 and w.get("load_failures", 0) == 0
    assert s.stats["admissions_refused"] == 0, "every request the plan admitted, vLLM's pass took"


def test_sync_load_mode_is_lossless_too(run_vllm: Callable[..., Any], prompts_for: Callable[[int], list[str]],
                                        tiny_model: Path, params_file: Path, ample_run: Any) -> None:
    run = run_vllm(tiny_model, prompts=prompts_for(NUM_PROMPTS), max_tokens=MAX_TOKENS, num_gpu_blocks=BLOCKS,
                   **rota_kwargs(params_file, host_blocks=HOST_BLOCKS, load="sync"))
    s = run.scheduler
    assert s.stats["rotations"] >= 100 and s.stats["recomputed_tokens"] == 0
    # a synchronous load resumes in the same step with exactly its one decode token per parked decode
    assert s.stats["resumed_scheduled_tokens"] < 2 * s.stats["resumed"]
    # a resume needs its parked blocks and its next token's: the plan reserves both, so vLLM never refuses one
    assert s.stats["admissions_refused"] == 0
    assert run.token_ids == ample_run.token_ids


# -- driving an engine step by step: live params, aborts --------------------------------------------------
@pytest.fixture(scope="module")
def driven(engine_cm: Callable[..., Any], prompts_for: Callable[[int], list[str]], tiny_model: Path,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    from superinfer.vllm.params import write_params

    pf = tmp_path_factory.mktemp("live") / "params.json"
    write_params(pf, ROTATE_HARD)
    obs: dict[str, Any] = {}
    with engine_cm(tiny_model, num_gpu_blocks=BLOCKS, **rota_kwargs(pf, host_blocks=256)) as llm:
        eng = llm.llm_engine
        sched = eng.engine_core.engine_core.scheduler
        worker = get_kv_transfer_group().worker
        sp = SamplingParams(temperature=0.0, max_tokens=150, ignore_eos=True)
        prompts = prompts_for(24)
        for i, p in enumerate(prompts):
            eng.add_request(f"r{i}", p, sp)
        t = sched.table

        def phases() -> set[int]:
            return {int(t.phase[r]) for r in t.live_rows() if not t.busy[r]}

        for _ in range(400):  # until a request is parked with output (rotary)
            eng.step()
            if Phase.ROTARY in phases() and any(sched.ledger.parked(rid)[0] for rid in sched.requests):
                break
        obs["published"] = sched.stats_dict()["ranking"]  # what the daemon's /v1/state shows
        obs["ranked"] = sched.ranking(10, sched.ranked[0]) if sched.ranked else []
        for i in range(len(prompts), len(prompts) + 4):  # fresh arrivals: waiting until the next step
            eng.add_request(f"r{i}", prompts[i % len(prompts)] + " again", sp)
        prompts = prompts + [""] * 4
        obs["phases"] = phases()
        # (c) live params: waiting first, then rotary first, by editing the file only
        reloads = sched.param_source.reloads
        write_params(pf, {**ROTATE_HARD, "alpha": 0.0, "delta_f": -60.0})
        now = sched.clock()
        plan_a = sched.plan_now(now)
        write_params(pf, {**ROTATE_HARD, "alpha": 100.0, "delta_f": 60.0, "delta_b": -10.0})
        os.utime(pf, ns=(0, os.stat(pf).st_mtime_ns + 1_000_000))  # a distinct mtime even on coarse clocks
        plan_b = sched.plan_now(now)
        obs["reloads"] = sched.param_source.reloads - reloads
        phase_of = {t.key_at(r): int(t.phase[r]) for r in t.live_rows()}
        obs["top_a"] = [phase_of[rid] for rid, _ in sched.ranking(3, plan_a)]
        obs["top_b"] = [phase_of[rid] for rid, _ in sched.ranking(3, plan_b)]
        # (b) abort mid-rotation: parked requests and running ones
        parked = [rid for rid in sched.requests if sched.ledger.parked(rid)[0]]
        running = [r.request_id for r in sched.running][:2]
        obs["aborted_parked"] = len(parked)
        eng.abort_request(parked[:4] + running)
        aborted = set(parked[:4] + running)
        finished: dict[str, int] = {}
        # Bounded by wall time, not by steps: steps waiting on asynchronous loads are empty and their
        # number depends on how fast the host copies, which a shared CI machine does not promise.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for out in eng.step():
                if out.finished:
                    finished[out.request_id] = len(out.outputs[0].token_ids)
            if not eng.has_unfinished_requests():
                break
        for _ in range(3):
            eng.step()  # deliver the last finished ids to the worker (drops)
        obs["finished"] = finished
        obs["aborted"] = aborted
        obs["all"] = {f"r{i}" for i in range(len(prompts))}
        obs["left_requests"] = len(sched.requests) + len(sched.table)
        obs["hbm_free"] = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        obs["ledger_free"] = (sched.ledger.free, sched.ledger.capacity, len(sched.ledger.recs))
        obs["worker_free"] = (worker.pool_free(), worker.host_blocks)
        obs["stats"] = dict(sched.stats)
    return obs


def test_the_plugin_publishes_its_last_ranking_for_the_dashboard(driven: dict[str, Any]) -> None:
    rows, ranked = driven["published"], driven["ranked"]
    assert rows and [(r["req_id"], r["vlt_s"]) for r in rows] == [(k, pytest.approx(v, abs=1e-6)) for k, v in ranked]
    assert all(r["req_id"].startswith("r") and r["tenant"] == "default" and r["age_s"] >= 0 for r in rows)
    assert {r["phase"] for r in rows} <= {"waiting", "rotary", "running"} and len(rows) <= 10


def test_live_params_change_the_ranking_without_restart(driven: dict[str, Any]) -> None:
    assert {Phase.ROTARY, Phase.WAITING} <= driven["phases"]
    assert driven["reloads"] == 2
    assert driven["top_a"][0] == Phase.WAITING  # alpha 0, delta_f -60: waiting requests lag most
    assert driven["top_b"][0] == Phase.ROTARY  # alpha 100, delta_b -10: parked requests lag most


def test_abort_mid_rotation_frees_both_tiers(driven: dict[str, Any]) -> None:
    assert driven["aborted_parked"] > 0
    survivors = driven["all"] - driven["aborted"]
    # nothing lost or stuck: every other request finished with its full output
    assert {k for k, n in driven["finished"].items() if n == 150} >= survivors
    assert driven["left_requests"] == 0
    assert driven["hbm_free"] == BLOCKS - 1
    free, cap, recs = driven["ledger_free"]
    assert free == cap and recs == 0
    wfree, wcap = driven["worker_free"]
    assert wfree == wcap == cap


# -- multiprocess (vLLM's default): scheduler and worker in different processes ---------------------------
MP_SCRIPT = textwrap.dedent("""
    import json, sys
    from superinfer.vllm.compat import check_vllm_version

    def main():
        from vllm import LLM, SamplingParams
        llm_kwargs, out, k = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
        prompts = json.load(open(sys.argv[4]))
        llm = LLM(**llm_kwargs)
        outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=k, ignore_eos=True),
                            use_tqdm=False)
        json.dump([list(o.outputs[0].token_ids) for o in outs], open(out, "w"))
        llm.llm_engine.engine_core.shutdown()

    if __name__ == "__main__":
        check_vllm_version()
        main()
""")


def test_multiprocess_engine_is_lossless(tiny_model: Path, params_file: Path, prompts_for: Callable[[int], list[str]],
                                         ample_run: Any, tmp_path: Path) -> None:
    script = tmp_path / "mp_run.py"
    script.write_text(MP_SCRIPT)
    # the engine's arguments, from the factory; load=None: the connector's default for a multiprocess engine
    engine = tmp_path / "llm.json"
    engine.write_text(json.dumps(llm_kwargs(tiny_model, blocks=BLOCKS,
                                            **rota_kwargs(params_file, host_blocks=HOST_BLOCKS, load=None))))
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(prompts_for(NUM_PROMPTS)))
    out, stats = tmp_path / "out.json", tmp_path / "stats.json"
    env = {**os.environ, **VLLM_TEST_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
           "SUPERINFER_STATS_FILE": str(stats)}
    proc = subprocess.run([sys.executable, str(script), str(engine), str(out), str(MAX_TOKENS), str(prompts)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(out.read_text()) == ample_run.token_ids
    st = json.loads(stats.read_text())  # written by the scheduler in the engine-core process
    assert st["scheduler"]["rotations"] > 20 and st["ledger"]["loads"] > 0
    assert st["scheduler"]["recomputed_tokens"] == 0
    assert st["host_free"] == st["host_capacity"]
