"""A controllable executor: nothing runs until the caller completes a batch, in the order it chooses.

It gives the caller exactly the freedom a real device has and no more: a batch may complete only when its
dependencies have completed (else :class:`DependencyNotMet`), and the copies inside one batch run in
reverse order (a batch promises no order). A missing dependency in the engine therefore shows up as a
wrong byte in a test that completes batches adversarially. Used by the ordering-rule tests and by
operators reproducing a race.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from superinfer.duplexkv.backends.base import CopyBackend
from superinfer.duplexkv.errors import DependencyNotMet
from superinfer.duplexkv.fences import EventHandle, Fence, Handle
from superinfer.duplexkv.merge import Direction


class ManualHandle(EventHandle):
    def __init__(self, direction: Direction, nbytes: int, ops: np.ndarray, deps: tuple[Fence, ...], seq: int) -> None:
        super().__init__(direction, nbytes, len(ops))
        self.op_table = ops
        self.deps = deps
        self.seq = seq

    def runnable(self) -> bool:
        return not self.done() and all(d.done() for d in self.deps)

    def wait(self, timeout: float | None = None) -> None:
        if not self.done():
            raise DependencyNotMet("a manual batch completes only when the test completes it")


class ManualExecutor:
    def __init__(self, backend: CopyBackend) -> None:
        self.backend = backend
        self.launched: list[ManualHandle] = []
        self._lock = threading.Lock()

    def launch(self, direction: Direction, ops: np.ndarray, nbytes: int, deps: Sequence[Fence]) -> Handle:
        with self._lock:
            handle = ManualHandle(direction, nbytes, ops, tuple(deps), len(self.launched))
            self.launched.append(handle)
            return handle

    def pending(self) -> list[ManualHandle]:
        return [h for h in self.launched if not h.done()]

    def complete(self, handle: ManualHandle) -> None:
        """Run one batch now (its copies in reverse order). Raises DependencyNotMet if it must wait."""
        if handle.done():
            return
        if not handle.runnable():
            raise DependencyNotMet(f"{handle.direction.value} batch #{handle.seq} has incomplete dependencies")
        self.backend.run(handle.op_table[::-1])
        handle.finish(0.0)

    def drain(self, prefer: Callable[[ManualHandle], float] | None = None, limit: int | None = None) -> int:
        """Complete runnable batches, lowest ``prefer`` key first (default: newest first). Returns count."""
        key = prefer or (lambda h: -h.seq)
        count = 0
        while limit is None or count < limit:
            ready = [h for h in self.launched if h.runnable()]
            if not ready:
                break
            self.complete(min(ready, key=key))
            count += 1
        return count

    def close(self) -> None:
        pass
