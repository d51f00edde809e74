"""The vLLM 0.32 (CPU) hook points the plugin is built on, exercised by minimal probes.

A probe scheduler (subclass of vLLM's ``Scheduler``, passed as ``scheduler_cls``) picks victims by
its own order, rotates requests out proactively and holds them back; a probe connector (loaded
through ``kv_connector_module_path``) copies a victim's blocks out in ``handle_preemptions`` and
back in ``start_load_kv``. If a vLLM upgrade moves any of these hooks, this file fails first.
See docs/vllm-notes.md for the line references.
"""

from __future__ import annotations

import collections
import math
import time
from pathlib import Path
from typing import Any

import pytest

vllm = pytest.importorskip("vllm")

from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: E402
    KVConnectorBase_V1,
    KVConnectorMetadata,
)
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402

NUM_PROMPTS = 40
MAX_TOKENS = 200
BLOCKS = 32
BLOCK_SIZE = 32

# Worker-side observations (in-process engine: same interpreter as the test).
WORKER_CALLS: collections.Counter[str] = collections.Counter()
KV_LAYOUT: dict[str, tuple[tuple[int, ...], str, bool]] = {}


class _ProbeMeta(KVConnectorMetadata):
    def __init__(self, saves: dict[str, list[int]], loads: dict[str, list[int]], drops: set[str]):
        self.saves, self.loads, self.drops = saves, loads, drops


class ProbeConnector(KVConnectorBase_V1):
    """Parks a victim's computed blocks in host tensors and restores them on resume (sync load)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.block_size = vllm_config.cache_config.block_size
        # scheduler side
        self.pending_saves: dict[str, list[int]] = {}
        self.parked: dict[str, int] = {}  # req id -> parked tokens
        self.loads: dict[str, list[int]] = {}
        self.drops: set[str] = set()
        self.stats: collections.Counter[str] = collections.Counter()
        # worker side
        self.kv: dict[str, Any] = {}
        self.store: dict[str, dict[str, Any]] = {}

    @property
    def requires_kv_delivery(self) -> bool:
        return False

    # --- scheduler side -------------------------------------------------------------------------
    def note_preempt(self, req_id: str, block_ids: list[int], num_computed: int) -> None:
        """Called by ProbeScheduler._preempt_request *before* vLLM frees the blocks."""
        nb = math.ceil(num_computed / self.block_size)
        self.pending_saves[req_id] = list(block_ids[:nb])
        self.parked[req_id] = num_computed

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        self.stats["matched_queries"] += 1
        n = self.parked.get(request.request_id, 0)
        if n > num_computed_tokens and request.request_id not in self.pending_saves:
            return n - num_computed_tokens, False  # synchronous load, before this step's forward
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens:
            rid = request.request_id
            nb = math.ceil(self.parked.pop(rid) / self.block_size)
            self.loads[rid] = list(blocks.get_block_ids()[0][:nb])
            self.stats["loads"] += 1
            self.stats["loaded_tokens"] += num_external_tokens

    def build_connector_meta(self, scheduler_output: Any) -> _ProbeMeta:
        meta = _ProbeMeta(self.pending_saves, self.loads, self.drops)
        self.pending_saves, self.loads, self.drops = {}, {}, set()
        return meta

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, None]:
        if self.parked.pop(request.request_id, None) is not None:
            self.drops.add(request.request_id)
        return False, None

    # --- worker side ----------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        WORKER_CALLS["register_kv_caches"] += 1
        self.kv = kv_caches
        for name, t in kv_caches.items():
            KV_LAYOUT[name] = (tuple(t.shape), str(t.dtype), t.is_contiguous())

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        import torch

        WORKER_CALLS["handle_preemptions"] += 1
        for rid, blocks in kv_connector_metadata.saves.items():
            WORKER_CALLS["saved_requests"] += 1
            idx = torch.tensor(blocks, dtype=torch.long)
            self.store[rid] = {k: v.index_select(0, idx).clone() for k, v in self.kv.items()}
        for rid in kv_connector_metadata.drops:
            self.store.pop(rid, None)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        import torch

        WORKER_CALLS["start_load_kv"] += 1
        for rid, blocks in self._get_connector_metadata().loads.items():
            WORKER_CALLS["loaded_requests"] += 1
            saved = self.store.pop(rid)
            idx = torch.tensor(blocks, dtype=torch.long)
            for k, v in self.kv.items():
                v.index_copy_(0, idx, saved[k][: len(blocks)])

    def wait_for_layer_load(self, layer_name: str) -> None:
        WORKER_CALLS["wait_for_layer_load"] += 1

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        WORKER_CALLS["save_kv_layer"] += 1

    def wait_for_save(self) -> None:
        WORKER_CALLS["wait_for_save"] += 1

    def get_finished(self, finished_req_ids: set[str]) -> tuple[None, None]:
        WORKER_CALLS["get_finished"] += 1
        return None, None


class ProbeScheduler(Scheduler):
    """Oldest-first victims (vLLM picks the newest); every ROT steps rotate out the request with the
    most output and hold it back HOLD steps; count recomputed tokens on resume."""

    ROT, HOLD = 15, 3

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: collections.Counter[str] = collections.Counter()
        self.hold_until: dict[str, int] = {}
        self.victims: list[str] = []
        self.resume_tokens: list[int] = []
        self.max_running_seen = 0

    def _preempt_request(self, request: Any, timestamp: float, *args: Any, **kwargs: Any) -> None:
        self.calls["preempt"] += 1
        self.victims.append(request.request_id)
        if isinstance(self.connector, ProbeConnector):
            self.connector.note_preempt(
                request.request_id,
                self.kv_cache_manager.get_block_ids(request.request_id)[0],
                request.num_computed_tokens,
            )
        super()._preempt_request(request, timestamp, *args, **kwargs)

    def _handle_blocked_waiting_request(self, request: Any) -> bool:
        if self.hold_until.get(request.request_id, -1) > self.current_step:
            self.calls["held"] += 1
            return False
        return super()._handle_blocked_waiting_request(request)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["schedule"] += 1
        # vLLM (FCFS) preempts running[-1] and serves running in list order: sorting decides both.
        self.running.sort(key=lambda r: -r.arrival_time)
        self.max_running_seen = max(self.max_running_seen, len(self.running))
        if self.current_step % self.ROT == 0 and len(self.running) > 1:
            r = max(self.running, key=lambda r: r.num_output_tokens)
            if r.num_computed_tokens >= r.num_tokens - 1:
                self.running.remove(r)
                self._preempt_request(r, time.monotonic())
                self.calls["rotated"] += 1
                self.hold_until[r.request_id] = self.current_step + 1 + self.HOLD
        out = super().schedule(*args, **kwargs)
        for rid in out.scheduled_cached_reqs.resumed_req_ids:
            self.resume_tokens.append(out.num_scheduled_tokens[rid])
        return out


@pytest.fixture(scope="module")
def probed(run_vllm: Any, prompts_for: Any, tiny_model: Path) -> Any:
    WORKER_CALLS.clear()
    KV_LAYOUT.clear()
    return run_vllm(
        tiny_model,
        prompts=prompts_for(NUM_PROMPTS),
        max_tokens=MAX_TOKENS,
        num_gpu_blocks=BLOCKS,
        block_size=BLOCK_SIZE,
        scheduler_cls=f"{__name__}.ProbeScheduler",  # string form, resolved by vLLM
        enable_prefix_caching=False,  # every restored token must come from the connector
        kv_transfer_config={
            "kv_connector": "ProbeConnector",
            "kv_connector_module_path": __name__,
            "kv_role": "kv_both",
        },
    )


def test_classes_load_from_strings(probed: Any) -> None:
    assert type(probed.scheduler).__name__ == "ProbeScheduler"
    assert type(probed.scheduler.connector).__name__ == "ProbeConnector"


def test_worker_hooks_run_on_cpu(probed: Any) -> None:
    steps = probed.scheduler.calls["schedule"]
    assert WORKER_CALLS["register_kv_caches"] == 1
    # once per executed step (steps with tokens); start_load_kv/wait_for_save even without loads
    assert WORKER_CALLS["handle_preemptions"] >= steps // 2
    assert WORKER_CALLS["start_load_kv"] == WORKER_CALLS["wait_for_save"] >= steps // 2
    # the attention layers call the per-layer hooks (2 layers per forward)
    assert WORKER_CALLS["save_kv_layer"] == WORKER_CALLS["wait_for_layer_load"] >= 2 * (steps // 2)
    assert WORKER_CALLS["get_finished"] > 0


def test_cpu_kv_layout_per_layer(probed: Any) -> None:
    # CPU attention: [num_blocks, num_kv_heads, block_size, 2 * head_dim] per layer, K then V
    # along the token axis after a view (cpu_attn.py); one block is one contiguous slab.
    assert set(KV_LAYOUT) == {f"model.layers.{i}.self_attn.attn" for i in range(2)}
    for shape, dtype, contiguous in KV_LAYOUT.values():
        assert shape == (BLOCKS, 1, BLOCK_SIZE, 2 * 64)
        assert dtype == "torch.float32" and contiguous


def test_victims_follow_the_schedulers_order(probed: Any) -> None:
    s = probed.scheduler
    assert s.calls["preempt"] > NUM_PROMPTS  # pressure plus rotation: many preemptions
    # vLLM alone evicts the newest running request; this order evicts the oldest: request 0 first.
    assert s.victims[0].split("-")[0] == "0"


def test_proactive_rotation_and_hold_back(probed: Any) -> None:
    s = probed.scheduler
    assert s.calls["rotated"] >= 20
    assert s.calls["held"] > 0  # rotated requests were skipped by the waiting loop while held


def test_resume_loads_parked_kv_instead_of_recomputing(probed: Any, ample_run: Any) -> None:
    s = probed.scheduler
    conn = s.connector
    assert WORKER_CALLS["saved_requests"] == s.calls["preempt"]
    assert conn.stats["loads"] == WORKER_CALLS["loaded_requests"] == len(s.resume_tokens) > 0
    # each resume schedules exactly its one decode token: nothing was recomputed
    assert set(s.resume_tokens) == {1}
    assert conn.stats["loaded_tokens"] > 100 * len(s.resume_tokens)
    # and lossless: token-for-token what stock vLLM produces with ample memory
    assert probed.token_ids == ample_run.token_ids
    assert [len(t) for t in probed.token_ids] == [MAX_TOKENS] * NUM_PROMPTS
    assert not conn.parked and not conn.pending_saves
