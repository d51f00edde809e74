"""Executors decide where and when a batch runs; backends decide how its bytes move.

``ThreadExecutor`` (host memory as the "device"): one worker thread per direction, FIFO like a stream, so
host-to-device and device-to-host batches run at the same time (the CPU analogue of full duplex). A
worker first waits for the batch's dependencies; a failed dependency fails the batch without copying.

``InlineExecutor``: each batch runs in the caller's thread when it is launched. What a CPU serving engine
uses (:mod:`superinfer.vllm.kvworker`): there the "device" is host memory, so a copy takes the same cores as
the model whichever thread runs it and a worker thread buys no overlap. It costs, though: measured on vLLM's
CPU engine (tiny Llama, 2 cores, 2026-12-04), once the worker threads had copied a few blocks every decode step
took 3.6 ms instead of 1.85 ms (the model's GEMMs ran 7x slower; one intra-op thread per worker did not help),
while the same copies run inline left it at 1.8 ms.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from superinfer.duplexkv.backends.base import CopyBackend
from superinfer.duplexkv.errors import TransferError
from superinfer.duplexkv.fences import EventHandle, Fence, Handle
from superinfer.duplexkv.merge import Direction

log = logging.getLogger(__name__)


class Executor(Protocol):
    def launch(self, direction: Direction, ops: np.ndarray, nbytes: int, deps: Sequence[Fence]) -> Handle: ...

    def close(self) -> None: ...


class ThreadExecutor:
    def __init__(self, backend: CopyBackend) -> None:
        self.backend = backend
        self._queues: dict[Direction, queue.Queue] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def _queue(self, direction: Direction) -> queue.Queue:
        with self._lock:
            if self._closed:
                raise TransferError("executor is closed")
            q = self._queues.get(direction)
            if q is None:
                q = queue.Queue()
                t = threading.Thread(target=self._work, args=(q,), name=f"duplexkv-{direction.value}", daemon=True)
                t.start()
                self._queues[direction], self._threads = q, self._threads + [t]
            return q

    def launch(self, direction: Direction, ops: np.ndarray, nbytes: int, deps: Sequence[Fence]) -> Handle:
        handle = EventHandle(direction, nbytes, len(ops))
        self._queue(direction).put((handle, ops, tuple(deps)))
        return handle

    def _work(self, q: queue.Queue) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            handle, ops, deps = item
            try:
                for dep in deps:
                    dep.wait()
                    if getattr(dep, "error", None) is not None:
                        raise TransferError(f"dependency failed: {dep.error}")
                t0 = time.perf_counter()
                self.backend.run(ops)
                handle.finish(time.perf_counter() - t0)
            except BaseException as exc:  # noqa: BLE001 - reported through the handle
                log.error("%s batch failed: %s", handle.direction.value, exc)
                handle.finish(0.0, exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for q in self._queues.values():
                q.put(None)
        for t in self._threads:
            t.join(timeout=10)


class InlineExecutor:
    """Runs each batch at launch, in the caller's thread (module docstring). A dependency must be complete
    by then (earlier batches of this executor are); one that is not within :data:`INLINE_WAIT_S` fails the
    batch, which copies nothing."""

    def __init__(self, backend: CopyBackend) -> None:
        self.backend = backend

    def launch(self, direction: Direction, ops: np.ndarray, nbytes: int, deps: Sequence[Fence]) -> Handle:
        handle = EventHandle(direction, nbytes, len(ops))
        try:
            for dep in deps:
                dep.wait(INLINE_WAIT_S)
                if getattr(dep, "error", None) is not None:
                    raise TransferError(f"dependency failed: {dep.error}")
            t0 = time.perf_counter()
            self.backend.run(ops)
            handle.finish(time.perf_counter() - t0)
        except BaseException as exc:  # noqa: BLE001 - reported through the handle, as the thread executor does
            log.error("%s batch failed: %s", direction.value, exc)
            handle.finish(0.0, exc)
        return handle

    def close(self) -> None: ...


#: how long an inline batch waits for a dependency that is not complete at launch (a compute fence)
INLINE_WAIT_S = 10.0


def default_executor(backend: CopyBackend, device: Any) -> Executor:
    """Two CUDA streams for KV on a GPU, two worker threads otherwise."""
    if getattr(device, "type", "cpu") == "cuda":
        from superinfer.duplexkv.cuda_executor import CudaStreamExecutor

        return CudaStreamExecutor(backend, device)
    return ThreadExecutor(backend)
