"""What the scheduler-side connector tells the worker each step, and what the worker reports back.

Everything here is plain, picklable data: under ``vllm serve`` the two sides live in different
processes, and the metadata object is the only channel between them (no shared Python state).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class DuplexKVMeta(KVConnectorMetadata):
    """One step's transfers, in the order the worker applies them.

    * ``drops``: requests that left; the worker waits for their copies, then frees their host blocks
      (before anything new is allocated, so the scheduler's host-pool mirror stays exact).
    * ``swap_outs``: ``(req, device blocks, num_full)``: preempted requests whose blocks must be parked
      *before* vLLM reuses them (done in ``handle_preemptions``); already-synced blocks are skipped.
    * ``loads``: ``(req, device blocks, async)``: resumed requests whose parked blocks are copied back
      (synchronously before the forward, or asynchronously with completion via ``get_finished``).
    * ``syncs``: ``(req, block index, device block)``: eager copies of full blocks, issued after the
      forward (``wait_for_save``), never waited for in the step.
    """

    step: int = 0
    drops: list[str] = field(default_factory=list)
    swap_outs: list[tuple[str, list[int], int]] = field(default_factory=list)
    loads: list[tuple[str, list[int], bool]] = field(default_factory=list)
    syncs: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class DuplexKVWorkerMeta(KVConnectorWorkerMetadata):
    """``d2h_done_step``: every eager sync issued in steps <= this one has completed (rule 1).
    ``failed``: requests whose parking failed on the worker (their parked KV must not be trusted)."""

    d2h_done_step: int = 0
    failed: list[str] = field(default_factory=list)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> "DuplexKVWorkerMeta":
        if not isinstance(other, DuplexKVWorkerMeta):
            return self
        return DuplexKVWorkerMeta(min(self.d2h_done_step, other.d2h_done_step), self.failed + other.failed)
