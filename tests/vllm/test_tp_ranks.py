"""DuplexKV across ranks without an engine: one scheduler-side ledger, two worker-side ranks (issue 14).

Each rank holds its own KV tensors (a different shard: different bytes); the ledger's per-step metadata is
applied to both, as vLLM's executor does, and their reports are aggregated as vLLM's ``KVOutputAggregator``
does (``DuplexKVWorkerMeta.aggregate``). A rank that fails a transfer must leave no rank with a host copy
that a later park or load would trust: the partly filled tail block is the trap (a park marks it synced;
only a load marks it stale), so a request recomputed instead of loaded on some rank must not keep it.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from superinfer.duplexkv import DuplexKVError  # noqa: E402
from superinfer.vllm.kvworker import KVWorker  # noqa: E402
from superinfer.vllm.ledger import HostLedger  # noqa: E402

BS, BLOCKS, HOST, DIM, LAYERS = 4, 8, 16, 4, 2
GARBAGE = -1.0


def value(rank: int, token: int) -> float:
    return rank * 1000.0 + token + 1.0


def make_rank() -> tuple[KVWorker, list[Any]]:
    """A worker over CPU KV tensors in vLLM's CPU layout ``[blocks, heads, block_size, 2 * head_dim]``."""
    caches = {f"layer{i}": torch.zeros(BLOCKS, 1, BS, 2 * DIM) for i in range(LAYERS)}
    w = KVWorker(HOST, backend="torch")
    w.register(caches)
    return w, list(caches.values())


def write(tensors: list[Any], rank: int, dev_blocks: list[int], tokens: int) -> None:
    """This rank's KV of ``tokens`` tokens in ``dev_blocks``; slots past the last token hold garbage."""
    for t in tensors:
        for b in dev_blocks:
            t[b].fill_(GARBAGE)
        for tok in range(tokens):
            t[dev_blocks[tok // BS], :, tok % BS, :] = value(rank, tok)


def read(tensors: list[Any], dev_blocks: list[int], tokens: int) -> list[float]:
    return [float(tensors[0][dev_blocks[tok // BS], 0, tok % BS, 0]) for tok in range(tokens)]


def fail_next(worker: KVWorker, kind: str) -> None:
    inner = worker.engine.submit
    left = [1]

    def submit(plan: Any, *a: Any, **k: Any) -> Any:
        if left[0] and any(type(i).__name__ == kind for i in plan.items):
            left[0] = 0
            raise DuplexKVError(f"injected {kind} failure")
        return inner(plan, *a, **k)

    worker.engine.submit = submit  # type: ignore[method-assign]


class Ranks:
    def __init__(self) -> None:
        self.ledger = HostLedger(HOST, BS, async_load=False)
        self.ranks = [make_rank() for _ in range(2)]

    def step(self) -> Any:
        """One engine step's connector hooks on every rank, then the aggregated report to the ledger."""
        meta = self.ledger.build_meta()
        for w, _ in self.ranks:
            w.handle_preemptions(meta)
            w.start_load(meta)
            w.save(meta)
        reports = [w.report() for w, _ in self.ranks]
        agg = reports[0].aggregate(reports[1])
        self.ledger.on_worker(agg.d2h_done_step, agg.failed)
        return meta

    def write(self, blocks: list[int], tokens: int) -> None:
        for rank, (_, t) in enumerate(self.ranks):
            write(t, rank, blocks, tokens)

    def resume(self, req: str, blocks: list[int], tokens: int) -> list[list[float]]:
        """Load the parked KV into ``blocks``; what each rank then holds."""
        assert self.ledger.matched(req, 0) == (tokens, False)
        self.ledger.after_alloc(req, blocks, tokens)
        self.step()
        return [read(t, blocks, tokens) for _, t in self.ranks]

    def pools_free(self) -> list[int]:
        return [w.pool_free() for w, _ in self.ranks]


def fresh(tokens: int) -> list[list[float]]:
    return [[value(rank, tok) for tok in range(tokens)] for rank in range(2)]


def test_aggregated_report_takes_the_slowest_rank_and_every_failure() -> None:
    from superinfer.vllm.kvmeta import DuplexKVWorkerMeta

    agg = DuplexKVWorkerMeta(7, ["a"]).aggregate(DuplexKVWorkerMeta(5, ["b", "a"]))
    assert agg.d2h_done_step == 5 and sorted(set(agg.failed)) == ["a", "b"]


def test_both_ranks_park_and_restore_their_own_shard() -> None:
    r = Ranks()
    r.write([2, 5], 6)
    assert r.ledger.preempt("q", [2, 5], 6, 8) == (6, 2)
    r.step()
    r.write([2, 5], 0)  # vLLM reuses the device blocks
    assert r.resume("q", [1, 4], 6) == fresh(6)  # each rank got its own bytes back


def test_a_park_refused_on_one_rank_is_dropped_on_every_rank() -> None:
    r = Ranks()
    r.write([2, 5], 6)  # block 1 is partly filled: tokens 4, 5 and two garbage slots
    r.ledger.preempt("q", [2, 5], 6, 8)
    fail_next(r.ranks[1][0], "SwapOut")
    r.step()  # rank 0 parked q, rank 1 could not
    assert r.ledger.parked("q") == (0, 0) and r.ledger.stats["recompute_fallbacks"] == 1
    assert r.ledger.matched("q", 0) == (0, False)  # recomputed: loaded on no rank
    meta = r.step()
    assert meta.drops == ["q"] and r.pools_free() == [HOST, HOST] and r.ledger.free == HOST
    # recomputed to 7 tokens in new blocks, parked and loaded again: rank 0 must not restore its old tail
    r.write([3, 6], 7)
    r.ledger.preempt("q", [3, 6], 7, 8)
    r.step()
    assert r.resume("q", [1, 4], 7) == fresh(7)


def test_a_load_refused_on_one_rank_leaves_no_stale_tail_there() -> None:
    r = Ranks()
    r.write([2, 5], 6)
    r.ledger.preempt("q", [2, 5], 6, 8)
    r.step()
    fail_next(r.ranks[1][0], "SwapIn")
    r.ledger.after_alloc("q", [1, 4], 6)
    r.step()  # rank 0 loaded q, rank 1 reported invalid blocks: vLLM recomputes them on every rank
    assert r.ranks[1][0].load_errors() == {1, 4} and r.ranks[1][0].stats["load_failures"] == 1
    r.write([1, 4], 7)  # the recompute, then one more token
    r.ledger.preempt("q", [1, 4], 7, 8)
    r.step()
    assert r.resume("q", [6, 7], 7) == fresh(7)
