"""superinfer's vLLM plugin: RotaSched as vLLM's scheduler, DuplexKV as its KV connector.

Class paths (once built): ``--scheduler-cls superinfer.vllm.RotaScheduler`` and
``--kv-transfer-config '{"kv_connector": "DuplexKVConnector", "kv_connector_module_path":
"superinfer.vllm", "kv_role": "kv_both"}'``. Importing this package is cheap: vLLM is imported only
when one of those names is accessed. ``superinfer.vllm.tiny`` builds a tiny test model and
``superinfer.vllm.compat`` pins the supported vLLM versions.
"""

from __future__ import annotations

from typing import Any

_PLUGIN_NAMES = ("RotaScheduler", "DuplexKVConnector")

__all__ = list(_PLUGIN_NAMES)


def __getattr__(name: str) -> Any:
    if name in _PLUGIN_NAMES:
        raise ImportError(
            f"superinfer.vllm.{name} is not built yet (issue 5: the vLLM plugin); "
            "only superinfer.vllm.tiny and superinfer.vllm.compat exist so far."
        )
    raise AttributeError(f"module 'superinfer.vllm' has no attribute {name!r}")
