"""DuplexKV across ranks: RotaScheduler + DuplexKVConnector on a real vLLM engine at TP=2 (CPU, tiny Llama).

TENSOR-PARALLEL TESTS (two worker processes; marked ``tp2`` and ``slow``; two engine starts, about two
minutes on two cores). The thread binding vLLM needs for two CPU ranks on one NUMA node comes from the
daemon's own function (``superinfer.daemon.parallel.cpu_thread_binding``), not from a hand-set variable.

What is specified:

* lossless: greedy outputs token for token equal to stock vLLM at TP=2 with ample memory, while requests
  rotate (swap-ins > 0, every resume loaded, 0 recomputed tokens);
* each rank parks and restores its own shard: both workers see the same parks, loads and bytes (the tiny
  model's one KV head is replicated on both ranks, so each rank's block is the whole block);
* a rank that fails a transfer makes the request recompute on *all* ranks: a park refused on rank 1 only
  (rank 0's succeeded) and a load refused on rank 1 only; the outputs stay equal to stock;
* aborts mid-rotation free both tiers on both ranks.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import make_llm, rota_kwargs  # type: ignore[import-not-found]

from superinfer.bench.engine.replay import owned_llm

pytest.importorskip("vllm")

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow, pytest.mark.tp2]

PROMPTS, TOKENS, BLOCKS, HOST_BLOCKS = 24, 150, 32, 512
ROTATE_HARD = {"ttft_slo": 0.05, "tbt_slo": 0.02, "delta_f": 0.0, "min_residency": 2, "b_xfer": 256,
               "slack_gate_s": -3600.0, "rotation_margin_s": 0.0}
BASE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false"}


@contextmanager
def tp2_env() -> Iterator[str | None]:
    """The test environment plus the binding the daemon would set for two CPU ranks."""
    from superinfer.daemon.parallel import BIND_ENV, cpu_thread_binding

    values = {k: v for k, v in os.environ.items() if k != BIND_ENV}
    values.update(BASE_ENV)
    binding = cpu_thread_binding(2, values)
    if binding is not None:
        values[BIND_ENV] = binding
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield binding
    finally:
        os.environ.clear()
        os.environ.update(old)


@contextmanager
def tp2_engine(model: Path, blocks: int, **kw: Any) -> Iterator[Any]:
    """:func:`make_llm` at TP=2 (two worker processes), in :func:`tp2_env`; shut down after."""
    with tp2_env(), owned_llm(lambda: make_llm(model, blocks=blocks, tensor_parallel_size=2,
                                               distributed_executor_backend="mp", **kw)) as llm:
        yield llm


# -- run inside the worker processes (collective_rpc pickles them by value) ------------------------------
def rank_state(worker: Any) -> dict[str, Any]:
    from vllm.distributed import get_tensor_model_parallel_rank
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    w = get_kv_transfer_group().worker
    return {"rank": get_tensor_model_parallel_rank(), "free": w.pool_free(), "cap": w.host_blocks,
            "block_bytes": w.engine.layout.block_bytes, "requests": len({k[0] for k in w.engine._state.host_of}),
            **{k: int(v) for k, v in w.stats.items()}}


def instrument(worker: Any, fault_rank: int, kinds: tuple[str, ...]) -> bool:
    """Log every park (SwapOut) and load (SwapIn) this rank's DuplexKV engine is asked for, and on rank
    ``fault_rank`` make the first plan holding each of ``kinds`` fail (logged with a ``!``)."""
    from vllm.distributed import get_tensor_model_parallel_rank
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    from superinfer.duplexkv import DuplexKVError

    rank = get_tensor_model_parallel_rank()
    eng = get_kv_transfer_group().worker.engine
    inner = eng.submit
    pending = set(kinds) if rank == fault_rank else set()
    log: list[tuple[str, str]] = []
    worker.superinfer_transfer_log = log

    def submit(plan: Any, *a: Any, **k: Any) -> Any:
        events = [(type(i).__name__, str(i.req_id)) for i in plan.items if type(i).__name__ in ("SwapOut", "SwapIn")]
        hit = pending & {kind for kind, _ in events}
        if hit:
            pending.difference_update(hit)
            log.extend((kind + "!", rid) for kind, rid in events)
            raise DuplexKVError(f"injected {'/'.join(sorted(hit))} failure on rank {rank}")
        ticket = inner(plan, *a, **k)
        log.extend(events)
        return ticket

    eng.submit = submit
    return bool(kinds) and rank == fault_rank


def transfer_log(worker: Any) -> list[tuple[str, str]]:
    return list(worker.superinfer_transfer_log)


def _by_value() -> None:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stock_tp2(vllm_ok: None, tiny_model: Path, prompts_for: Any) -> list[list[int]]:
    """Stock vLLM at TP=2 with ample KV memory: the reference outputs."""
    from vllm import SamplingParams

    with tp2_engine(tiny_model, 400) as llm:
        outs = llm.generate(prompts_for(PROMPTS), SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True),
                            use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]


def drain(eng: Any, done: dict[str, list[int]], deadline_s: float = 300) -> None:
    deadline = time.monotonic() + deadline_s
    while eng.has_unfinished_requests() and time.monotonic() < deadline:
        for out in eng.step():
            if out.finished:
                done[out.request_id] = list(out.outputs[0].token_ids)
    for _ in range(3):
        eng.step()  # deliver the last finished ids to the workers (drops)


@pytest.fixture(scope="module")
def rota_tp2(vllm_ok: None, tiny_model: Path, prompts_for: Any, tmp_path_factory: pytest.TempPathFactory) -> dict:
    from vllm import SamplingParams

    from superinfer.vllm.params import write_params

    _by_value()
    pf = tmp_path_factory.mktemp("tp2") / "params.json"
    write_params(pf, ROTATE_HARD)
    obs: dict[str, Any] = {}
    sp = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    prompts = prompts_for(PROMPTS)
    with tp2_env() as binding, tp2_engine(tiny_model, BLOCKS, **rota_kwargs(pf, host_blocks=HOST_BLOCKS)) as llm:
        obs["binding"] = binding
        eng = llm.llm_engine
        sched = eng.engine_core.engine_core.scheduler
        # (a) clean: every request to the end
        done: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            eng.add_request(f"a{i}", p, sp)
        drain(eng, done)
        obs["clean"] = {"outputs": [done.get(f"a{i}") for i in range(PROMPTS)], "stats": dict(sched.stats),
                        "ledger": dict(sched.ledger.stats), "ranks": llm.collective_rpc(rank_state)}
        # (b) faults on rank 1 only: one park, then one load; then aborts mid-rotation
        obs["armed"] = llm.collective_rpc(instrument, args=(1, ("SwapOut", "SwapIn")))
        done = {}
        for i, p in enumerate(prompts):
            eng.add_request(f"b{i}", p, sp)
        aborted: list[str] = []
        deadline = time.monotonic() + 300
        while eng.has_unfinished_requests() and time.monotonic() < deadline and not aborted:
            for out in eng.step():
                if out.finished:
                    done[out.request_id] = list(out.outputs[0].token_ids)
            parked = [r for r in sched.requests if sched.ledger.parked(r)[0]]
            led = sched.ledger.stats
            if led["worker_park_failures"] and led["loads"] > obs["clean"]["ledger"]["loads"] + 60 and len(parked) >= 3:
                faulted = {rid for log in llm.collective_rpc(transfer_log) for k, rid in log if k.endswith("!")}
                internal = [r for r in parked if r not in faulted][:3] + \
                    [r.request_id for r in sched.running if r.request_id not in faulted][:2]
                aborted = [rid.split("-")[0] for rid in internal]  # the ids given to add_request
                eng.abort_request(aborted)
        drain(eng, done)
        obs["faults"] = {"outputs": done, "aborted": set(aborted), "stats": dict(sched.stats),
                         "ledger": dict(sched.ledger.stats), "ranks": llm.collective_rpc(rank_state),
                         "logs": llm.collective_rpc(transfer_log),
                         "ledger_free": (sched.ledger.free, sched.ledger.capacity, len(sched.ledger.recs)),
                         "hbm_free": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                         "left": len(sched.requests) + len(sched.table)}
    return obs


# -- the specification ----------------------------------------------------------------------------------
def test_daemon_binding_makes_tp2_start_on_cpu(rota_tp2: dict) -> None:
    from superinfer.daemon.parallel import numa_nodes

    if numa_nodes() < 2:  # one NUMA node: vLLM's own binding refuses two ranks, the daemon's splits the CPUs
        assert rota_tp2["binding"] is not None and rota_tp2["binding"].count("|") == 1


def test_tp2_rotation_is_lossless(rota_tp2: dict, stock_tp2: list[list[int]]) -> None:
    c = rota_tp2["clean"]
    st, led = c["stats"], c["ledger"]
    assert st["rotations"] > 20 and led["loads"] > 20 and led["swap_in_blocks"] > 0, (st, led)
    assert st["recomputed_tokens"] == 0 and led.get("recompute_fallbacks", 0) == 0, (st, led)
    assert c["outputs"] == stock_tp2


def test_each_rank_parks_and_restores_its_own_shard(rota_tp2: dict) -> None:
    r0, r1 = sorted(rota_tp2["clean"]["ranks"], key=lambda r: r["rank"])
    led = rota_tp2["clean"]["ledger"]
    assert (r0["rank"], r1["rank"]) == (0, 1)
    # the decisions were made once (the scheduler's ledger) and applied on both ranks
    for key in ("parked", "loads", "synced_blocks", "d2h_bytes", "h2d_bytes"):
        assert r0[key] == r1[key] > 0, key
    assert r0["parked"] == led["parks"] and r0["loads"] == led["loads"]
    # one KV head, replicated at TP=2: each rank's block is 2 layers x K,V x 64 x 32 tokens x fp32
    assert r0["block_bytes"] == r1["block_bytes"] == 2 * 2 * 64 * 32 * 4


def test_a_rank_that_fails_a_transfer_makes_all_ranks_recompute(rota_tp2: dict, stock_tp2: list[list[int]]) -> None:
    f = rota_tp2["faults"]
    assert rota_tp2["armed"] == [False, True]  # faults armed on rank 1 only
    r0, r1 = sorted(f["ranks"], key=lambda r: r["rank"])
    assert r1.get("park_failures", 0) >= 1 and r0.get("park_failures", 0) == 0
    assert r1.get("load_failures", 0) == 1 and r0.get("load_failures", 0) == 0
    assert f["ledger"]["worker_park_failures"] >= 1 and f["ledger"]["recompute_fallbacks"] >= 1
    log0, log1 = f["logs"]
    # one decision, every rank: the same parks and loads in the same order; rank 1's refused ones marked
    assert [(k.rstrip("!"), r) for k, r in log1] == log0
    failed_parks = {r for k, r in log1 if k == "SwapOut!"}
    failed_loads = {r for k, r in log1 if k == "SwapIn!"}
    assert failed_parks and len(failed_loads) == 1
    for rid in failed_parks:  # parked on rank 0 but not on rank 1: loaded on *no* rank, recomputed on all
        i = next(j for j, (k, r) in enumerate(log1) if r == rid and k == "SwapOut!")
        later = [k for k, r in log0[i + 1:] if r == rid]
        assert not later or later[0] == "SwapOut", (rid, later)
    assert f["stats"]["recomputed_tokens"] > 0  # the refused park's tokens, recomputed
    # no mixed state: every surviving request, the recomputed ones included, is token for token stock TP=2
    # (a recompute is exact here: stock vLLM at TP=2 with 32 blocks preempts by recompute and matches the
    # ample-memory run too; before the fix of ledger.forget a refused park diverged at its 16th token)
    assert {rid.split("-")[0] for rid in failed_parks | failed_loads} - f["aborted"], "a faulted request survived"
    survivors = {rid: out for rid, out in f["outputs"].items() if rid not in f["aborted"]}
    assert len(survivors) == PROMPTS - len(f["aborted"])
    for rid, out in survivors.items():
        assert out == stock_tp2[int(rid[1:])], rid


def test_aborts_mid_rotation_free_both_tiers_on_both_ranks(rota_tp2: dict) -> None:
    f = rota_tp2["faults"]
    assert len(f["aborted"]) >= 3 and f["left"] == 0
    assert f["hbm_free"] == BLOCKS - 1
    free, cap, recs = f["ledger_free"]
    assert free == cap == HOST_BLOCKS and recs == 0
    for r in f["ranks"]:
        assert r["free"] == r["cap"] == HOST_BLOCKS and r["requests"] == 0, r
