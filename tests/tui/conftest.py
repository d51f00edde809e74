"""Helpers for the dashboard's tests: the screen as text, waiting on a pilot, a real sim daemon."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from textual.app import App
from textual.pilot import Pilot

from tests.daemon.conftest import DaemonProc, start_daemon


def screen_text(app: App) -> str:
    """The current screen as plain text (what ``tmux capture-pane -p`` would show)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


async def wait_for(pilot: Pilot, cond: Callable[[], object], timeout: float = 20.0, what: str = "") -> None:
    """Pump the app until ``cond()`` is true; fail with the screen after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what or cond}:\n{screen_text(pilot.app)}")


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    """One sim daemon (loopback, free port, the daemon tests' small profile, no replay) shared by the
    dashboard's tests; it is stopped (SIGTERM, drained) at the end of the session."""
    tmp: Path = tmp_path_factory.mktemp("tui-daemon")
    d: DaemonProc = start_daemon(tmp)
    yield d
    d.terminate()
