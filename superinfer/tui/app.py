"""The Textual app: layout, keys, the poll worker.

One worker polls (so polls never overlap and never block the UI): poll, apply, wait ``interval`` (or
the reconnect backoff) or until ``r``/``+``/``-`` wake it. After each poll every panel redraws itself
from the tracker (``show(tracker, now)``: :mod:`~superinfer.tui.widgets`, :mod:`~superinfer.tui.tenants`);
the header and banner also tick once a second (data age, disconnected time). Layout (``app.tcss``):
fixed panel heights; below 100 columns or 30 rows the compact layout drops the transfer, tuner and
ranking panels and the tenant table's less important columns. Dialogs: :mod:`~superinfer.tui.dialogs`,
opened by the key actions in :mod:`~superinfer.tui.actions`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer

from superinfer.tui.actions import Actions
from superinfer.tui.source import LiveSource, Poll, ReplaySource, backoff_s
from superinfer.tui.status import Session
from superinfer.tui.tenants import TenantPanel, TenantRows
from superinfer.tui.tracker import Tracker
from superinfer.tui.widgets import (Banner, EventsPanel, HeaderBar, KvPanel, ParamsPanel, QueuesPanel, RankingPanel,
                                    Shows, TransferPanel, TunerPanel)

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
MESSAGE_S = 10.0
COMPACT_W, COMPACT_H = 100, 30
#: the panels :meth:`TopApp.render_all` redraws after each poll, in this order
PANELS: tuple[type[Shows], ...] = (TenantPanel, KvPanel, QueuesPanel, TransferPanel, ParamsPanel, TunerPanel,
                                   RankingPanel, EventsPanel)


class TopApp(Actions, App[None]):
    """``superinferd top``. ``source``: a live daemon or a recording."""

    CSS_PATH = "app.tcss"
    TITLE = "superinferd top"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("space", "pause", "pause"),
        Binding("Z", "pause", "pause", show=False),
        Binding("r", "refresh", "refresh"),
        Binding("plus,equals_sign", "interval(1)", "interval", key_display="+/-"),
        Binding("minus", "interval(-1)", "interval", show=False),
        Binding("tab", "tenant(1)", "tenant", show=False),
        Binding("shift+tab", "tenant(-1)", "tenant", show=False),
        Binding("e", "edit", "edit"),
        Binding("f", "freeze", "freeze"),
        Binding("l", "log", "log"),
        Binding("s", "save", "save"),
        Binding("question_mark", "help", "help", key_display="?"),
    ]

    def __init__(self, source: LiveSource | ReplaySource, interval_s: float = 1.0, url: str = "",
                 read_only_reason: str | None = None, save_dir: Path | None = None, autopoll: bool = True) -> None:
        super().__init__()
        self.source = source
        self.tracker = Tracker()
        self.session = Session(url=url, interval_s=interval_s, read_only_reason=read_only_reason,
                               replay=source.replay)
        self.save_dir = save_dir or Path.cwd()
        self.compact = False
        self._wake = asyncio.Event()
        self._bounds: dict[str, Any] | None = None
        self._now = 0.0  # replay: the recorded time of the newest frame
        self.autopoll = autopoll  # False: the caller feeds :meth:`apply` (snapshot tests)

    # ---- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HeaderBar(self.session, id="header")
        yield Banner(self.session, id="banner")
        with Vertical(id="body"):
            yield TenantPanel(id="tenants-box")
            with Horizontal(id="row1"):
                yield KvPanel(id="kv")
                yield QueuesPanel(id="queues")
                yield TransferPanel(id="transfer")
            with Horizontal(id="row2"):
                yield ParamsPanel(id="params")
                yield TunerPanel(id="tuner")
                yield RankingPanel(id="ranking")
            yield EventsPanel(id="events")
        yield Footer()

    def on_mount(self) -> None:
        self._layout(self.size.width, self.size.height)
        self.main.query_one(TenantRows).focus()
        self.render_all()
        if self.autopoll:
            self.run_worker(self._poll_loop(), exclusive=True, group="poll", name="poll")
            self.set_interval(1.0, self._tick)

    def on_resize(self, event: Any) -> None:
        if self._drawable():
            self._layout(event.size.width, event.size.height)
            self.render_all()

    def _layout(self, width: int, height: int) -> None:
        self.compact = width < COMPACT_W or height < COMPACT_H
        self.main.query_one("#body").set_class(self.compact, "compact")

    @property
    def main(self) -> Screen:
        """The dashboard's screen (dialogs are pushed above it; polls keep drawing here)."""
        return self.screen_stack[0]

    def _drawable(self) -> bool:
        return self.is_running and bool(self.screen_stack) and self.main.is_attached

    def now(self) -> float:
        return self._now if self.source.replay else time.time()

    # ---- polling --------------------------------------------------------------------------------
    async def _poll_loop(self) -> None:
        while True:
            if not self.session.paused or self._wake.is_set():
                self._wake.clear()
                poll = await self.source.poll()
                if poll is None:  # the recording is over: keep its last frame
                    self.session.replay_ended = True
                    self.render_all()
                    return
                self.apply(poll)
            delay = backoff_s(self.session.interval_s, self.source.failures)
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    def apply(self, poll: Poll) -> None:
        """Feed one poll to the tracker and redraw."""
        self._now = poll.t
        if isinstance(self.source, LiveSource):
            self.session.url = self.source.target.url
            reason = self.source.target.read_only_reason  # a token can appear (first start) or vanish
            if reason != self.session.read_only_reason:
                self.session.read_only_reason = reason
                self.refresh_bindings()
        if poll.state is None:
            retry = None if self.source.replay else backoff_s(self.session.interval_s, self.source.failures)
            self.tracker.lost(poll.error or "no answer", poll.t, retry)
        else:
            if poll.config is not None:
                self.tracker.set_config(poll.config)
            if self.tracker.observe(poll.state, poll.t, poll.tuner):
                self._bounds = None
        self.render_all()

    def _tick(self) -> None:
        if not self.source.replay:
            self._render_status()

    # ---- drawing --------------------------------------------------------------------------------
    def _render_status(self) -> None:
        if not self._drawable():
            return
        now = self.now()
        for line in (HeaderBar, Banner):
            self.main.query_one(line).show(self.tracker, now)
        self.main.query_one("#body").set_class(not self.tracker.connected and self.tracker.state is not None, "stale")

    def render_all(self) -> None:
        """Redraw every panel from the tracker (nothing once the app is closing)."""
        if not self._drawable():
            return
        self._render_status()
        tr, now = self.tracker, self.now()
        for panel in PANELS:
            self.main.query_one(panel).show(tr, now)

    # ---- keys -----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("edit", "freeze") and self.session.read_only_reason is not None:
            return None  # shown greyed out
        return True

    def say(self, text: str, level: str = "info") -> None:
        self.session.message, self.session.message_level = text, level
        self.session.message_until = self.now() + MESSAGE_S if not self.source.replay else float("inf")
        self._render_status()

    def action_pause(self) -> None:
        self.session.paused = not self.session.paused
        if not self.session.paused:
            self._wake.set()
        self._render_status()

    def action_refresh(self) -> None:
        self._wake.set()

    def action_interval(self, step: int) -> None:
        cur = self.session.interval_s
        i = min(range(len(INTERVALS)), key=lambda j: abs(INTERVALS[j] - cur))
        self.session.interval_s = INTERVALS[min(max(i + step, 0), len(INTERVALS) - 1)]
        self.say(f"polling every {self.session.interval_s:g}s")
        self._wake.set()

    def action_tenant(self, step: int) -> None:
        table = self.main.query_one(TenantRows)
        if table.row_count:
            table.move_cursor(row=(table.cursor_row + step) % table.row_count)
            self.render_all()

    def on_data_table_row_highlighted(self, _: Any) -> None:
        self.render_all()

    async def on_unmount(self) -> None:
        await self.source.aclose()
