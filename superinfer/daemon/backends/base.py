"""What the server needs from an engine backend, and the pieces both backends share."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.daemon.server import Daemon

#: the key of ``vllm_xargs`` (vLLM: ``sampling_params.extra_args``) that names the request's tenant
TENANT_XARG = "tenant"


class Backend(abc.ABC):
    """One engine. Lifecycle: ``__init__`` (cheap, validates) -> :meth:`start` -> serving ->
    :meth:`stop_admission` -> :meth:`drain` -> :meth:`close`. ``beat`` is ``time.monotonic()`` of the
    engine loop's last turn; the watchdog only pings systemd while it is fresh."""

    name: str = ""
    simulation: bool = False
    beat: float = 0.0

    @abc.abstractmethod
    def model_name(self) -> str: ...

    def default_b_xfer(self) -> int | None:
        """B_xfer when the profile says ``auto`` and no probe should decide (None: use the probe)."""
        return None

    def block_bytes(self) -> int | None:
        """Bytes of one KV block, for the probe (None: skip the probe)."""
        return None

    @abc.abstractmethod
    async def start(self, daemon: "Daemon") -> None: ...

    @abc.abstractmethod
    def register_routes(self, app: "FastAPI", daemon: "Daemon") -> None: ...

    @abc.abstractmethod
    def engine_state(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def counters(self) -> dict[str, int]: ...

    @abc.abstractmethod
    def inflight(self) -> int: ...

    def stop_admission(self) -> None:
        """New requests are refused from now on (the API answers 503)."""

    @abc.abstractmethod
    async def drain(self, timeout_s: float) -> dict[str, Any]:
        """Wait up to ``timeout_s`` for in-flight requests; abort the rest. Returns a summary."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    def on_params(self, values: dict[str, float | int]) -> None:
        """New live params (already validated and written to the params file)."""
