"""The KV worker's cost sums (``superinfer.vllm.kvworker``, the twin's ``host_kv`` term): every park, load
and eager sync that copies blocks adds its time against the blocks it copied; one that copies nothing is not
timed; :func:`kv_lines` turns the sums into the twin's per-operation lines."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")
torch = pytest.importorskip("torch")

from superinfer.bench.fidelity.host import kv_lines  # noqa: E402
from superinfer.vllm.kvworker import KV_KINDS, KVWorker  # noqa: E402
from superinfer.vllm.ledger import HostLedger  # noqa: E402

BS, BLOCKS, HOST = 4, 8, 16


class Rig:
    """One worker over CPU KV tensors in vLLM's CPU layout, driven by a scheduler-side ledger."""

    def __init__(self) -> None:
        self.ledger = HostLedger(HOST, BS, async_load=False)
        self.worker = KVWorker(HOST, backend="torch")
        self.worker.register({f"layer{i}": torch.zeros(BLOCKS, 1, BS, 8) for i in range(2)})

    def step(self) -> None:
        meta = self.ledger.build_meta()
        self.worker.handle_preemptions(meta)
        self.worker.start_load(meta)
        self.worker.save(meta)
        self.ledger.on_worker(self.worker.report().d2h_done_step, [])

    def sums(self, kind: str) -> tuple[int, int, int]:
        st = self.worker.stats
        return st[f"{kind}_n"], st[f"{kind}_x"], st[f"{kind}_xx"]


def test_a_park_and_its_load_each_add_one_timed_operation_of_the_blocks_they_copied() -> None:
    rig = Rig()
    assert rig.ledger.preempt("q", [2, 5], 6, 8) == (6, 2)  # 6 tokens in two blocks, none synced yet
    rig.step()
    st = rig.worker.stats
    assert rig.sums("park") == (1, 2, 4) and st["park_ns"] > 0 and st["park_ns_x"] == 2 * st["park_ns"]
    assert rig.sums("load") == (0, 0, 0)
    rig.ledger.matched("q", 0)
    rig.ledger.after_alloc("q", [1, 4], 6)
    rig.step()
    st = rig.worker.stats
    assert rig.sums("load") == (1, 2, 4) and st["load_ns"] > 0 and st["load_ns_x"] == 2 * st["load_ns"]


def test_an_operation_that_copies_nothing_is_not_timed() -> None:
    rig = Rig()
    rig.step()  # nothing parked, loaded or synced
    for kind in KV_KINDS:
        assert rig.sums(kind) == (0, 0, 0)


def test_kv_lines_turn_the_sums_into_a_fixed_and_a_per_block_cost_per_operation() -> None:
    ops = {"park": [(1, 3_000), (3, 5_000)], "load": [(2, 10_000), (4, 14_000), (8, 22_000)], "sync": []}
    sums = {}
    for kind, points in ops.items():
        sums.update({f"{kind}_n": len(points), f"{kind}_x": sum(x for x, _ in points),
                     f"{kind}_xx": sum(x * x for x, _ in points), f"{kind}_ns": sum(y for _, y in points),
                     f"{kind}_ns_x": sum(x * y for x, y in points)})
    got = kv_lines(sums)
    assert got["park_call_s"] == pytest.approx(2e-6) and got["park_block_s"] == pytest.approx(1e-6)
    assert got["load_s"] == pytest.approx(6e-6) and got["load_block_s"] == pytest.approx(2e-6)
    assert got["sync_call_s"] == 0.0 and got["sync_block_s"] == 0.0, "never run: costs nothing"
