"""superinfer's vLLM plugin: RotaSched as vLLM's scheduler, DuplexKV as its KV connector.

Class paths: ``--scheduler-cls superinfer.vllm.RotaScheduler`` and ``--kv-transfer-config
'{"kv_connector": "DuplexKVConnector", "kv_connector_module_path": "superinfer.vllm", "kv_role":
"kv_both"}'``. Importing this package is cheap: vLLM is imported only when one of those names is
accessed (PEP 562), and then the installed vLLM version is checked first
(:func:`superinfer.vllm.compat.check_vllm_version`; an unsupported build raises ImportError).
This package holds only what vLLM loads; the tools that measure it (``bench vllm``, ``bench fidelity``,
``calibrate``) live in ``superinfer.bench``, the tiny test model in ``superinfer.daemon.backends.tiny``;
see docs/vllm-plugin.md.
"""

from __future__ import annotations

from typing import Any

_PLUGIN = {
    "RotaScheduler": "superinfer.vllm.scheduler",
    "RotaAsyncScheduler": "superinfer.vllm.scheduler",
    "DuplexKVConnector": "superinfer.vllm.connector",
}

__all__ = list(_PLUGIN)


def __getattr__(name: str) -> Any:
    module_name = _PLUGIN.get(name)
    if module_name is None:
        raise AttributeError(f"module 'superinfer.vllm' has no attribute {name!r}")
    import importlib

    from superinfer.vllm.compat import check_vllm_version

    check_vllm_version()
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
