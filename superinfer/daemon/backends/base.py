"""What the server needs from an engine backend (:class:`Backend`), and what a backend may use of the
server (:class:`Host`).

Dependencies point one way: the server imports the backends; a backend sees the daemon only through
:class:`Host`, which :class:`superinfer.daemon.server.Daemon` satisfies structurally (this module does not
import the server, not even for type checking).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.daemon.config import Config
    from superinfer.daemon.metrics import DaemonMetrics
    from superinfer.daemon.params import ParamStore
    from superinfer.daemon.stats import SloWindow
    from superinfer.daemon.tuning import TunerService


class Host(Protocol):
    """Everything a backend uses of the daemon that runs it; all read-only for the backend.

    ``cfg`` the effective configuration (``get``, ``d``, ``tenants``); ``store`` the live params (backends
    read ``params()``, ``values`` and ``path``; changes arrive through :meth:`Backend.on_params`);
    ``metrics`` the Prometheus families the backend records into; ``slo`` the per-tenant SLO windows
    behind ``/v1/state``; ``ready`` is True once :meth:`Backend.start` returned; ``draining`` is True from
    the first shutdown signal on (the backend refuses new requests from then on); ``tuner`` the online
    tuner's feed (None when it is off): backends report each request they can time to it (``arrival``,
    ``first_token``, ``finished``, with the request's arrival on ``time.monotonic()``).
    """

    @property
    def cfg(self) -> Config: ...

    @property
    def store(self) -> ParamStore: ...

    @property
    def metrics(self) -> DaemonMetrics: ...

    @property
    def slo(self) -> SloWindow: ...

    @property
    def ready(self) -> bool: ...

    @property
    def draining(self) -> bool: ...

    @property
    def tuner(self) -> TunerService | None: ...


class Backend(abc.ABC):
    """One engine. Lifecycle: ``__init__`` (cheap, validates; raises ``ValueError`` or
    :class:`~superinfer.daemon.errors.StartError`) -> :meth:`start` -> serving -> :meth:`stop_admission`
    -> :meth:`drain` -> :meth:`close`.

    Invariants the server relies on: ``beat`` is ``time.monotonic()`` of the engine loop's last turn (the
    watchdog pings systemd only while it is fresh); ``crashed`` stays None while the engine loop lives and
    is set once, from any thread, to the exception that ended it (the daemon then reports ``failed`` and
    exits 1); it is never reset.
    """

    name: str = ""
    simulation: bool = False
    beat: float = 0.0
    crashed: BaseException | None = None

    @abc.abstractmethod
    def model_name(self) -> str: ...

    def default_b_xfer(self) -> int | None:
        """B_xfer when the profile says ``auto`` and no probe should decide (None: use the probe)."""
        return None

    def block_bytes(self) -> int | None:
        """Bytes of one KV block, for the probe (None: skip the probe)."""
        return None

    @abc.abstractmethod
    async def start(self, host: Host) -> None:
        """Start the engine; returns once it serves. Raises :class:`~superinfer.daemon.errors.StartError`
        (its ``code`` becomes the exit status) when it cannot."""

    @abc.abstractmethod
    def register_routes(self, app: FastAPI, host: Host) -> None:
        """Add the backend's OpenAI routes to the control API's app (before the server listens)."""

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
