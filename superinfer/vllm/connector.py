"""``superinfer.vllm.DuplexKVConnector``: vLLM KV connector (v1) that parks preempted KV in host memory.

Load it with::

    --kv-transfer-config '{"kv_connector": "DuplexKVConnector",
                           "kv_connector_module_path": "superinfer.vllm", "kv_role": "kv_both",
                           "kv_connector_extra_config": {"host_blocks": 4096}}'

vLLM builds two instances: role SCHEDULER (inside the scheduler, :mod:`superinfer.vllm.ledger`) and role
WORKER (next to the KV tensors, :mod:`superinfer.vllm.kvworker`). They share nothing but the per-step
metadata (:mod:`superinfer.vllm.kvmeta`), so the same code works in-process and under ``vllm serve``.

Extra config keys (all optional): ``host_blocks`` (host pool size in KV blocks; default 4x the device
blocks), ``load`` (``"async"`` or ``"sync"``; default ``"sync"`` on a CPU engine, ``"async"`` elsewhere, see
:func:`default_load`), ``backend`` (DuplexKV copy backend,
``auto``), ``params_file`` (see :mod:`superinfer.vllm.params`), ``calibration`` (a calibration file: the
step-time model of RotaSched v2's SLO token budget; the scheduler reads it).

Use it with :class:`superinfer.vllm.RotaScheduler`: the scheduler plans the eager syncs (within
``B_xfer``) and reports each victim's block ids *before* vLLM frees them. Under a stock scheduler the
connector receives neither, so it parks and restores nothing (plain recompute).
"""

from __future__ import annotations

import logging
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from superinfer.vllm.kvmeta import DuplexKVMeta, DuplexKVWorkerMeta
from superinfer.vllm.ledger import HostLedger

log = logging.getLogger(__name__)

_EXTRA_KEYS = frozenset({"host_blocks", "load", "backend", "params_file", "policy", "calibration"})


def connector_extra(vllm_config: Any) -> dict[str, Any]:
    """``kv_connector_extra_config`` of the engine (``{}`` without a KV transfer config)."""
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    return dict(getattr(ktc, "kv_connector_extra_config", None) or {})


def recompute_failed_loads(vllm_config: Any) -> None:
    """Make vLLM recompute a request whose parked KV failed to load (``kv_load_failure_policy =
    "recompute"``) instead of failing it (vLLM's default, ``"fail"``, meant for KV that exists nowhere else).
    Parked KV is a copy of this engine's own: recomputing it is always possible. With tensor parallelism a
    load refused by one rank is reported as invalid blocks and every rank recomputes them. Called by the
    scheduler-side connector, which vLLM builds before it reads the policy."""
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    if ktc is not None and getattr(ktc, "kv_load_failure_policy", "recompute") != "recompute":
        log.info("DuplexKVConnector: kv_load_failure_policy %r -> 'recompute' (a failed load of parked KV is "
                 "recomputed, never fails the request)", ktc.kv_load_failure_policy)
        ktc.kv_load_failure_policy = "recompute"


def default_load(vllm_config: Any) -> str:
    """``"sync"`` when the KV cache lives in host memory (CPU engine), else ``"async"``.

    On CPU there is no DMA engine to overlap with: an asynchronous load runs on DuplexKV's Python copy thread,
    which competes for the GIL with the engine loop. That loop spins through empty steps while the loaded
    request waits in ``WAITING_FOR_REMOTE_KVS`` holding its blocks, so each copy op waits up to a GIL switch
    interval (5 ms) and a load took up to 5 s in ``bench vllm`` (58,210 of 59,340 steps empty). A synchronous
    load is waited for before the forward and the request runs in the same step.
    """
    device = getattr(getattr(vllm_config, "device_config", None), "device_type", None)
    return "sync" if str(device or "").startswith("cpu") else "async"


class DuplexKVConnector(KVConnectorBase_V1):
    """Eager sync of full blocks, tail-only parking on preemption, lossless resume (see module doc)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        extra = connector_extra(vllm_config)
        unknown = set(extra) - _EXTRA_KEYS
        if unknown:
            raise ValueError(f"DuplexKVConnector: unknown kv_connector_extra_config key(s) {sorted(unknown)}; "
                             f"known: {sorted(_EXTRA_KEYS)}")
        load = extra.get("load", default_load(vllm_config))
        if load not in ("async", "sync"):
            raise ValueError(f"DuplexKVConnector: load must be 'async' or 'sync', got {load!r}")
        device_blocks = int(getattr(kv_cache_config, "num_blocks", 0) or 0)
        host_blocks = extra.get("host_blocks", max(64, 4 * device_blocks))
        if isinstance(host_blocks, bool) or not isinstance(host_blocks, int) or host_blocks < 1:
            raise ValueError(f"DuplexKVConnector: host_blocks must be a positive integer, got {host_blocks!r}")
        self.block_size = int(vllm_config.cache_config.block_size)
        self.host_blocks = host_blocks
        self.ledger: HostLedger | None = None
        self.worker = None
        if role == KVConnectorRole.SCHEDULER:
            recompute_failed_loads(vllm_config)
            self.ledger = HostLedger(host_blocks, self.block_size, async_load=(load == "async"))
        else:
            from superinfer.vllm.kvworker import KVWorker  # torch + DuplexKV only where bytes move

            self.worker = KVWorker(host_blocks, backend=str(extra.get("backend", "auto")))

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # our saves are a cache for our own resumes, not a hand-off to another engine

    # -- scheduler side --------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        return self.ledger.matched(request.request_id, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self.ledger.after_alloc(request.request_id, blocks.get_block_ids()[0], num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return self.ledger.build_meta()

    def update_connector_output(self, connector_output: Any) -> None:
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(meta, DuplexKVWorkerMeta):
            self.ledger.on_worker(meta.d2h_done_step, meta.failed)

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self.ledger.finished(request.request_id)
        return False, None

    # -- worker side -----------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        self.worker.register(kv_caches)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        if isinstance(kv_connector_metadata, DuplexKVMeta):
            self.worker.handle_preemptions(kv_connector_metadata)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if isinstance(meta, DuplexKVMeta):
            self.worker.start_load(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None  # synchronous loads finished in start_load_kv; async ones are not read until reported

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None  # eager syncs are issued once per step in wait_for_save, after the whole forward

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if isinstance(meta, DuplexKVMeta):
            self.worker.save(meta)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return self.worker.get_finished()

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker.load_errors()

    def build_connector_worker_meta(self) -> DuplexKVWorkerMeta | None:
        return self.worker.report()

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.close()
