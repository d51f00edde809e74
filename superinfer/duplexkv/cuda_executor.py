"""Two CUDA streams, one per direction: the copy engines run host-to-device and device-to-host at once.

A batch's dependencies that carry a ``cuda_event`` become ``Stream.wait_event`` (no host blocking);
others (host fences) are waited on by the submitting thread before enqueueing, so on a GPU compute fences
should be :class:`CudaFence`. Rule 4 backstop: a device-to-host batch also waits for the work already
enqueued on the submitting thread's current stream (the compute that wrote the blocks, when the plan is
submitted from the compute thread after launching it); host-to-device batches do not, so swap-ins for
the next iteration overlap the current one. Each batch is bracketed by timing events, so per-direction
busy time is measured on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from superinfer.duplexkv.backends.base import CopyBackend
from superinfer.duplexkv.errors import TransferError
from superinfer.duplexkv.fences import Fence, Handle, _poll
from superinfer.duplexkv.merge import Direction


class CudaHandle(Handle):
    def __init__(self, direction: Direction, nbytes: int, ops: int, start: Any, end: Any, keep: Any) -> None:
        super().__init__(direction, nbytes, ops)
        self._start, self.cuda_event, self._keep = start, end, keep
        self._final = False

    def done(self) -> bool:
        if self._final:
            return True
        if not self.cuda_event.query():
            return False
        self._finalize()
        return True

    def _finalize(self) -> None:
        self.elapsed_s = self._start.elapsed_time(self.cuda_event) / 1e3
        self._keep = None
        self._final = True

    def wait(self, timeout: float | None = None) -> None:
        _poll(self.done, timeout, self.cuda_event.synchronize)
        self.done()


class CudaStreamExecutor:
    def __init__(self, backend: CopyBackend, device: Any) -> None:
        self.backend = backend
        self.device = torch.device(device)
        self._streams = {d: torch.cuda.Stream(device=self.device) for d in Direction}

    def launch(self, direction: Direction, ops: np.ndarray, nbytes: int, deps: Sequence[Fence]) -> Handle:
        stream = self._streams[direction]
        if direction is Direction.D2H:
            produced = torch.cuda.Event()
            produced.record(torch.cuda.current_stream(self.device))
            stream.wait_event(produced)
        for dep in deps:
            event = getattr(dep, "cuda_event", None)
            if event is not None:
                stream.wait_event(event)
            else:
                dep.wait()
            if getattr(dep, "error", None) is not None:
                raise TransferError(f"dependency failed: {dep.error}")
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            start.record(stream)
            keep = self.backend.run(ops, stream)
            end.record(stream)
        return CudaHandle(direction, nbytes, len(ops), start, end, keep)

    def close(self) -> None:
        for stream in self._streams.values():
            stream.synchronize()
