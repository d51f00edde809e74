"""Copy backends behind one interface, chosen automatically with an override.

``auto``: ``cuda`` (copy engines) when the KV lives on a CUDA device, else ``torch``. The Triton
interpreter is never chosen automatically on CPU: it is a correctness tool, ~1 ms per program.
The environment variable ``SUPERINFER_KV_BACKEND`` overrides ``auto``.
"""

from __future__ import annotations

import os

import torch

from superinfer.duplexkv.backends.base import CopyBackend
from superinfer.duplexkv.errors import BackendUnavailable

NAMES = ("auto", "torch", "triton", "cuda")


def make_backend(name: str, device: torch.device) -> CopyBackend:
    """Instantiate a backend by name for KV on ``device``. Raises BackendUnavailable or ValueError."""
    if name not in NAMES:
        raise ValueError(f"unknown KV copy backend {name!r}; choose one of {', '.join(NAMES)}")
    if name == "auto":
        name = os.environ.get("SUPERINFER_KV_BACKEND", "") or ("cuda" if device.type == "cuda" else "torch")
        if name not in NAMES or name == "auto":
            raise ValueError(f"SUPERINFER_KV_BACKEND={name!r} is not one of torch, triton, cuda")
    if name == "torch":
        from superinfer.duplexkv.backends.torch_backend import TorchBackend

        return TorchBackend()
    if name == "triton":
        from superinfer.duplexkv.backends.triton_backend import TritonBackend

        return TritonBackend()
    if device.type != "cuda":
        raise BackendUnavailable("the cuda backend needs KV on a CUDA device")
    from superinfer.duplexkv.backends.cuda_backend import CudaBackend

    return CudaBackend()


__all__ = ["CopyBackend", "NAMES", "make_backend"]
