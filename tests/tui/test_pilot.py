"""The dashboard driven by Textual's pilot against a real ``superinferd`` (sim backend, loopback, free port).

Every test runs the app in-process (``App.run_test``) polling a daemon subprocess every 0.25 s.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from superinfer.tui.app import TopApp
from superinfer.tui.connect import resolve_target
from superinfer.tui.dialogs import ConfirmScreen, EditScreen, HelpScreen, LogScreen
from superinfer.tui.source import LiveSource
from superinfer.tui.tenants import TenantRows
from tests.daemon.conftest import DaemonProc, start_daemon
from tests.tui.conftest import screen_text, wait_for

pytestmark = pytest.mark.timeout(120)


def make_app(d: DaemonProc, token_file: Path | None = None, read_only: bool = False, **kw) -> TopApp:
    target = resolve_target(state_dir=d.state_dir, token_file=token_file, read_only=read_only, env={})
    return TopApp(LiveSource(target), interval_s=0.25, url=target.url, read_only_reason=target.read_only_reason,
                  **kw)


def banner(app: TopApp) -> str:
    return str(app.query_one("#banner").render())


def preview(app: TopApp) -> str:
    return str(app.screen.query_one("#preview").render())


async def connected(pilot, app: TopApp) -> None:
    await wait_for(pilot, lambda: app.query_one(TenantRows).row_count > 0, what="tenant rows")
    await wait_for(pilot, lambda: "voice" in screen_text(app), what="the rows drawn")


async def open_edit(pilot, app: TopApp, value: str) -> None:
    """e, pick the first knob (alpha), type ``value``, enter: the confirmation is showing."""
    await pilot.press("e")
    await wait_for(pilot, lambda: isinstance(app.screen, EditScreen), what="the edit dialog")
    await pilot.press("enter")
    await pilot.press(*value)
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.screen.stage == "confirm", what="the confirmation")


def test_tenant_rows_and_simulation_badge(daemon: DaemonProc) -> None:
    async def go() -> None:
        app = make_app(daemon)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            text = screen_text(app)
            assert "SIMULATION" in text.splitlines()[0]
            table = app.query_one(TenantRows)
            assert [str(k.value) for k in table.rows] == ["chat", "voice"]  # stable row keys: tenant names
            assert "1s/50ms" in text  # voice's SLOs from the daemon
            # no request yet: nothing judged, no green 100 %
            assert str(table.get_row("chat")[1]) == "· —" and str(table.get_row("chat")[4]) == "—"
            assert "connected: sim backend" in text

    asyncio.run(go())


def test_edit_changes_the_daemons_params_and_version(daemon: DaemonProc) -> None:
    async def go() -> None:
        before = daemon.get("/v1/params").json()
        app = make_app(daemon)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await open_edit(pilot, app, "4.5")
            assert f"Send alpha {before['alpha']:g} → 4.5?" in preview(app)
            await pilot.press("y")
            await wait_for(pilot, lambda: not isinstance(app.screen, EditScreen), what="the dialog to close")
            after = daemon.get("/v1/params").json()
            assert after["alpha"] == 4.5 and after["version"] == before["version"] + 1
            assert after["source"].startswith("api:")
            assert f"alpha {before['alpha']:g} → 4.5 (params v{after['version']})" in banner(app)
            await wait_for(pilot, lambda: "alpha 3 → 4.5" in screen_text(app) or
                           f"alpha {before['alpha']:g} → 4.5" in screen_text(app), what="the params event")

    asyncio.run(go())


def test_cancelled_edit_changes_nothing(daemon: DaemonProc) -> None:
    async def go() -> None:
        before = daemon.get("/v1/params").json()
        app = make_app(daemon)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await open_edit(pilot, app, "7")
            polled = app.tracker.t
            await wait_for(pilot, lambda: app.tracker.t != polled, what="polls while the dialog is open")
            assert isinstance(app.screen, EditScreen)  # a poll redraws the dashboard under the dialog
            await pilot.press("n")
            await wait_for(pilot, lambda: not isinstance(app.screen, EditScreen))
            assert "edit cancelled: nothing sent" in banner(app)
            await pilot.press("e")  # escape while picking
            await wait_for(pilot, lambda: isinstance(app.screen, EditScreen))
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, EditScreen))
        assert daemon.get("/v1/params").json() == before

    asyncio.run(go())


def test_out_of_bound_value_shows_the_422_message(daemon: DaemonProc) -> None:
    async def go() -> None:
        before = daemon.get("/v1/params").json()
        app = make_app(daemon)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await open_edit(pilot, app, "1000")
            assert "outside [0, 100] declared by the daemon" in preview(app)  # flagged before sending
            await pilot.press("y")
            await wait_for(pilot, lambda: "HTTP 422" in preview(app), what="the 422")
            assert "alpha must be within [0.0, 100.0]" in preview(app)  # the daemon's own message
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, EditScreen))
            assert "not changed: refused, HTTP 422: alpha must be within" in banner(app)
            # a value that is not a number never leaves the dialog
            await pilot.press("e")
            await wait_for(pilot, lambda: isinstance(app.screen, EditScreen))
            await pilot.press("down", "down", "down", "enter")  # min_residency: an integer knob
            await pilot.press("2", ".", "5", "enter")
            assert app.screen.stage == "type" and "must be an integer" in preview(app)
            await pilot.press("escape")
        assert daemon.get("/v1/params").json() == before

    asyncio.run(go())


def test_wrong_token_shows_401(daemon: DaemonProc, tmp_path: Path) -> None:
    bad = tmp_path / "token"
    bad.write_text("not-the-token-0123456789\n")

    async def go() -> None:
        before = daemon.get("/v1/params").json()
        app = make_app(daemon, token_file=bad)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await open_edit(pilot, app, "5")
            await pilot.press("y")
            await wait_for(pilot, lambda: "HTTP 401" in preview(app), what="the 401")
            assert "missing or wrong bearer token" in preview(app)
            assert "not-the-token" not in screen_text(app)  # the token is never shown
        assert daemon.get("/v1/params").json() == before

    asyncio.run(go())


def test_a_concurrent_change_is_shown_before_overwriting(daemon: DaemonProc) -> None:
    async def go() -> None:
        app = make_app(daemon)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await open_edit(pilot, app, "2")
            old_df = daemon.get("/v1/params").json()["delta_f"]
            r = await asyncio.to_thread(daemon.put, "/v1/params", json={"delta_f": old_df + 0.25},
                                        headers=daemon.headers())
            assert r.status_code == 200, r.text
            await pilot.press("y")
            await wait_for(pilot, lambda: app.screen.stage == "conflict", what="the conflict")
            assert "Changed meanwhile" in preview(app) and f"delta_f {old_df:g} → {old_df + 0.25:g}" in preview(app)
            await pilot.press("y")
            await wait_for(pilot, lambda: not isinstance(app.screen, EditScreen))
        after = daemon.get("/v1/params").json()
        assert after["alpha"] == 2.0 and after["delta_f"] == old_df + 0.25

    asyncio.run(go())


def test_read_only_greys_out_edit_and_freeze(daemon: DaemonProc) -> None:
    async def go() -> None:
        app = make_app(daemon, read_only=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            assert app.check_action("edit", ()) is None and app.check_action("freeze", ()) is None
            await pilot.press("e")
            await pilot.press("f")
            await pilot.pause(0.2)
            assert not isinstance(app.screen, (EditScreen, ConfirmScreen))
            text = screen_text(app)
            assert "READ-ONLY" in text and "read-only: --read-only" in text

    asyncio.run(go())


def test_keys_pause_freeze_save_log_help(daemon: DaemonProc, tmp_path: Path) -> None:
    async def go() -> None:
        app = make_app(daemon, save_dir=tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            await connected(pilot, app)
            await pilot.press("f")
            if app.tracker.tuner is None:  # no tuner in this daemon yet: f says so
                await wait_for(pilot, lambda: "tuner is not available" in banner(app))
            else:
                await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                await pilot.press("n")
            await pilot.press("s")
            saved = list(tmp_path.glob("superinfer-state-*.json"))
            assert len(saved) == 1
            doc = json.loads(saved[0].read_text())
            assert doc["state"]["backend"] == "sim" and "tenants" in doc["derived"]
            await pilot.press("l")
            await wait_for(pilot, lambda: isinstance(app.screen, LogScreen))
            assert "connected: sim backend" in screen_text(app)
            await pilot.press("escape", "question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            assert "freeze / unfreeze" in screen_text(app)
            await pilot.press("escape", "space")
            await wait_for(pilot, lambda: "PAUSED" in banner(app))
            polled = app.tracker.t
            await pilot.pause(0.8)
            assert app.tracker.t == polled  # paused: no poll
            await pilot.press("r")
            await wait_for(pilot, lambda: app.tracker.t != polled, what="r to poll once while paused")
            await pilot.press("space", "plus")
            assert app.session.interval_s == 0.5

    asyncio.run(go())


def test_killing_the_daemon_shows_the_banner_and_a_restart_reconnects(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("superinfer.tui.source.MAX_BACKOFF_S", 1.0)
    d = start_daemon(tmp_path)
    try:
        async def go() -> None:
            app = make_app(d)
            async with app.run_test(size=(120, 40)) as pilot:
                await connected(pilot, app)
                old_pid = app.tracker.state["pid"]
                await asyncio.to_thread(d.terminate)
                await wait_for(pilot, lambda: "DISCONNECTED" in banner(app), what="the banner")
                text = screen_text(app)
                assert "retrying" in text and "last frame shown dimmed" in text
                assert "chat" in text  # the last frame stays
                assert app.query_one("#body").has_class("stale")
                d2 = await asyncio.to_thread(start_daemon, tmp_path, state_dir=d.state_dir)
                try:
                    await wait_for(pilot, lambda: app.tracker.connected and app.tracker.restarts == 1,
                                   timeout=30, what="the reconnect")
                    assert app.tracker.state["pid"] == d2.proc.pid != old_pid
                    text = screen_text(app)
                    assert f"daemon restarted: pid {old_pid} → {d2.proc.pid}" in text
                    assert "DISCONNECTED" not in banner(app) and not app.query_one("#body").has_class("stale")
                finally:
                    await asyncio.to_thread(d2.terminate)

        asyncio.run(go())
    finally:
        if d.proc.poll() is None:
            d.terminate()
