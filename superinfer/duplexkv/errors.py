"""Typed errors of the DuplexKV engine.

The scheduler catches :class:`HostPoolFull` and falls back to recompute for the request whose plan was
refused; every other error here means a bug or a broken device and should surface to the operator.
"""

from __future__ import annotations


class DuplexKVError(RuntimeError):
    """Base class of every error raised by ``superinfer.duplexkv``."""


class HostPoolFull(DuplexKVError):
    """The host (DRAM) pool cannot hold the blocks a plan needs. Nothing was allocated or copied."""

    def __init__(self, requested: int, free: int, capacity: int) -> None:
        super().__init__(
            f"host KV pool full: plan needs {requested} more block(s), {free} free of {capacity}; "
            "fall back to recompute for this request or free parked requests"
        )
        self.requested = requested
        self.free = free
        self.capacity = capacity


class PlanError(DuplexKVError, ValueError):
    """A transfer plan is inconsistent with the engine's state (unknown block, missing host copy...)."""


class TransferError(DuplexKVError):
    """A copy failed on the device or in a worker thread."""


class DependencyNotMet(DuplexKVError):
    """A controllable executor was asked to complete a batch whose dependencies are not complete."""


class BackendUnavailable(DuplexKVError):
    """The requested copy backend cannot run here (no CUDA, no Triton, unpinned host memory...)."""


class PinnedMemoryError(DuplexKVError):
    """``cudaHostRegister``/``cudaHostUnregister`` returned an error code."""

    def __init__(self, call: str, code: int, offset: int, nbytes: int) -> None:
        super().__init__(f"{call} failed with CUDA error {code} at offset {offset} ({nbytes} bytes)")
        self.call = call
        self.code = code
        self.offset = offset
        self.nbytes = nbytes
