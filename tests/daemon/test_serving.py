"""The daemon in-process: the host interfaces backends and the API see, health, and one serving-loop tick.

The subprocess tests (test_lifecycle, test_api) cover the same paths end to end; these pin the contracts
without a socket: :class:`Daemon` has every member of :class:`Host` and :class:`ControlHost`, ``health``
reads ``Backend.crashed``, and :meth:`Serving.tick` turns a finished start, a failed start, a crashed
engine loop and a signal into READY/WATCHDOG, exit codes and a stop.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from superinfer.daemon.api import ControlHost
from superinfer.daemon.backends.base import Backend, Host
from superinfer.daemon.config import resolve
from superinfer.daemon.errors import StartError
from superinfer.daemon.server import Daemon, Serving


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.host: Host | None = None

    def model_name(self) -> str:
        return "fake-model"

    async def start(self, host: Host) -> None:
        self.host = host
        self.beat = time.monotonic()
        if self.fail is not None:
            raise self.fail

    def register_routes(self, app: Any, host: Host) -> None:
        pass

    def engine_state(self) -> dict[str, Any]:
        return {}

    def counters(self) -> dict[str, int]:
        return {"arrived": 0, "finished": 0}

    def inflight(self) -> int:
        return 0

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        pass


class RecordingNotifier:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[str] = []

    def ready(self, status: str) -> None:
        self.sent.append("READY")

    def status(self, status: str) -> None:
        self.sent.append("STATUS")

    def watchdog(self) -> None:
        self.sent.append("WATCHDOG")


def protocol_members(proto: type) -> set[str]:
    return {name for cls in proto.__mro__ if getattr(cls, "_is_protocol", False) and cls.__module__ != "typing"
            for name in vars(cls) if not name.startswith("_")}


def make_daemon(tmp_path: Path, backend: Backend) -> Daemon:
    cfg = resolve("chat", flags={"state_dir": str(tmp_path)}, env={})
    return Daemon(cfg, backend)


def test_daemon_has_every_member_of_host_and_control_host(tmp_path: Path) -> None:
    d = make_daemon(tmp_path, FakeBackend())
    d.store = object()  # set by run() before serving; only its presence matters here
    host, control = protocol_members(Host), protocol_members(ControlHost)
    assert host == {"cfg", "store", "metrics", "slo", "ready", "draining", "tuner"}
    assert host < control
    missing = sorted(name for name in control if not hasattr(d, name))
    assert missing == []


def test_health_reads_the_backends_crashed(tmp_path: Path) -> None:
    b = FakeBackend()
    d = make_daemon(tmp_path, b)
    assert Backend.crashed is None and d.health() == "starting"
    d.ready, b.beat = True, time.monotonic()
    assert d.health() == "ok"
    b.crashed = RuntimeError("engine loop died")
    assert d.health() == "failed"


def run_ticks(daemon: Daemon, ticks: int = 1) -> tuple[Serving, list[bool]]:
    """Start the backend as :meth:`Serving.startup` would (without listening) and tick ``ticks`` times."""

    async def go() -> tuple[Serving, list[bool]]:
        s = Serving(daemon)
        s.notifier = RecordingNotifier()  # type: ignore[assignment]
        s.start_task = asyncio.create_task(daemon.backend.start(daemon))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return s, [s.tick() for _ in range(ticks)]

    return asyncio.run(go())


def test_tick_settles_a_finished_start_then_pings(tmp_path: Path) -> None:
    b = FakeBackend()
    d = make_daemon(tmp_path, b)
    s, keep = run_ticks(d, 2)
    assert keep == [True, True] and d.ready and b.host is d and s.exit_code == 0
    assert s.start_task is None
    assert s.notifier.sent.count("READY") == 1 and s.notifier.sent.count("WATCHDOG") == 2


@pytest.mark.parametrize("code", [1, 2])
def test_tick_stops_with_the_failed_starts_exit_code(tmp_path: Path, code: int) -> None:
    d = make_daemon(tmp_path, FakeBackend(fail=StartError("no engine", code)))
    s, keep = run_ticks(d)
    assert keep == [False] and s.exit_code == code and s.stop.is_set() and not d.ready
    assert "READY" not in s.notifier.sent


def test_tick_stops_with_1_when_the_engine_loop_crashed(tmp_path: Path) -> None:
    b = FakeBackend()
    d = make_daemon(tmp_path, b)
    b.crashed = RuntimeError("engine loop died")
    s, keep = run_ticks(d)
    assert keep == [False] and s.exit_code == 1 and "WATCHDOG" not in s.notifier.sent


def test_tick_stops_on_a_signal(tmp_path: Path) -> None:
    d = make_daemon(tmp_path, FakeBackend())

    async def go() -> tuple[Serving, bool]:
        s = Serving(daemon=d)
        s.notifier = RecordingNotifier()  # type: ignore[assignment]
        s.stop.set()
        return s, s.tick()

    s, keep = asyncio.run(go())
    assert keep is False and s.exit_code == 0 and s.notifier.sent == []
