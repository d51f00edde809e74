"""Completion objects: handles of launched batches and fences of compute.

Anything with ``done() -> bool`` and ``wait(timeout)`` can be a dependency of a batch. A dependency that
also has a ``cuda_event`` attribute is waited on by the copy stream (``Stream.wait_event``) without
blocking the host; any other dependency is waited on by the executor before the batch starts.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol, runtime_checkable

from superinfer.duplexkv.errors import TransferError
from superinfer.duplexkv.merge import Direction


@runtime_checkable
class Fence(Protocol):
    def done(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> None: ...


class HostFence:
    """A fence the host signals (CPU compute, tests)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def signal(self) -> None:
        self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if not self._event.wait(timeout):
            raise TimeoutError("fence not signalled in time")


class CudaFence:
    """A fence for GPU compute: a ``torch.cuda.Event`` recorded on the compute stream."""

    def __init__(self, event: Any) -> None:
        self.cuda_event = event

    def done(self) -> bool:
        return bool(self.cuda_event.query())

    def wait(self, timeout: float | None = None) -> None:
        _poll(self.done, timeout, self.cuda_event.synchronize)


def _poll(done, timeout: float | None, block) -> None:
    if timeout is None:
        block()
        return
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("copy not complete in time")
        time.sleep(0.0005)


class Handle:
    """One launched batch of one direction. ``elapsed_s`` and ``error`` are final once ``done()``."""

    def __init__(self, direction: Direction, nbytes: int, ops: int) -> None:
        self.direction = direction
        self.nbytes = nbytes
        self.ops = ops
        self.elapsed_s = 0.0
        self.error: BaseException | None = None

    def done(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise TransferError(f"{self.direction.value} batch failed: {self.error}") from self.error


class EventHandle(Handle):
    """A handle completed by a host thread (thread and manual executors)."""

    def __init__(self, direction: Direction, nbytes: int, ops: int) -> None:
        super().__init__(direction, nbytes, ops)
        self._event = threading.Event()

    def finish(self, elapsed_s: float, error: BaseException | None = None) -> None:
        self.elapsed_s = elapsed_s
        self.error = error
        self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> None:
        if not self._event.wait(timeout):
            raise TimeoutError(f"{self.direction.value} batch not complete in time")
