"""The Textual app: layout, keys, the poll worker.

One worker polls (so polls never overlap and never block the UI): poll, apply, wait ``interval`` (or
the reconnect backoff) or until ``r``/``+``/``-`` wake it. Panels are redrawn from the tracker after each
poll; the header and banner also tick once a second (data age, disconnected time). Layout: fixed panel
heights; below 100 columns or 30 rows the compact layout drops the transfer, tuner and ranking panels
and the tenant table's less important columns.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from superinfer.tui import panels
from superinfer.tui.css import TOP_CSS
from superinfer.tui.actions import Actions
from superinfer.tui.fmt import fit
from superinfer.tui.source import LiveSource, Poll, ReplaySource, backoff_s
from superinfer.tui.status import Session, banner, header
from superinfer.tui.tenants import TenantTable, layout_for
from superinfer.tui.tracker import Tracker

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
MESSAGE_S = 10.0
COMPACT_W, COMPACT_H = 100, 30
MAX_TENANT_ROWS = 8


class TopApp(Actions, App[None]):
    """``superinferd top``. ``source``: a live daemon or a recording."""

    CSS = TOP_CSS
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
        yield Static(id="header")
        yield Static(id="banner")
        with Vertical(id="body"):
            with Vertical(id="tenants-box", classes="panel"):
                yield TenantTable(id="tenants")
                yield Static(id="why")
            with Horizontal(id="row1"):
                yield Static(id="kv", classes="panel")
                yield Static(id="queues", classes="panel")
                yield Static(id="transfer", classes="panel")
            with Horizontal(id="row2"):
                yield Static(id="params", classes="panel")
                yield Static(id="tuner", classes="panel")
                yield Static(id="ranking", classes="panel")
            yield Static(id="events", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        titles = {"tenants-box": "SLOs per tenant", "kv": "KV cache", "queues": "queues", "transfer": "transfer",
                  "params": "params", "tuner": "tuner", "ranking": "VLT ranking (served first)", "events": "events"}
        for wid, title in titles.items():
            self.main.query_one(f"#{wid}").border_title = title
        self._layout(self.size.width, self.size.height)
        self.main.query_one(TenantTable).focus()
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
        self.main.query_one("#header", Static).update(header(self.tracker, now, self.session, self.size.width))
        text, cls = banner(self.tracker, now, self.session)
        b = self.main.query_one("#banner", Static)
        b.update(text)
        b.set_classes(cls)
        self.main.query_one("#body").set_class(not self.tracker.connected and self.tracker.state is not None, "stale")

    def render_all(self) -> None:
        """Redraw every panel from the tracker (nothing once the app is closing)."""
        if not self._drawable():
            return
        self._render_status()
        tr, now = self.tracker, self.now()
        table = self.main.query_one(TenantTable)
        table.update_from(tr, now, layout_for(self.size.width))
        n = min(max(len((tr.state or {}).get("tenants") or {}), 1), MAX_TENANT_ROWS)
        self.main.query_one("#tenants-box").styles.height = n + 4  # borders, column header, rows, why
        sel = table.selected
        why = Text(no_wrap=True, overflow="ellipsis")
        if sel is not None and tr.state is not None:
            why.append(f"why ({sel}): ", style="bold")
            why.append(tr.tenant(sel, now)["why"])
        self.main.query_one("#why", Static).update(fit(why, self.size.width - 4))
        box = self.main.query_one("#tenants-box")
        box.border_title = (f"SLOs per tenant · window {tr.state.get('slo_window_s', '—')}s · target "
                            f"{100 * tr.target:.0f}%" if tr.state else "SLOs per tenant")
        w = self.size.width
        third = max(24, w // 3 - 4)
        self.main.query_one("#kv", Static).update(panels.kv(tr, w // 2 - 4 if self.compact else third))
        self.main.query_one("#queues", Static).update(panels.queues(tr, w // 2 - 4 if self.compact else third))
        self.main.query_one("#transfer", Static).update(panels.transfer(tr, third))
        self.main.query_one("#transfer").border_subtitle = panels.transfer_note(tr)
        self.main.query_one("#kv").border_title = panels.kv_title(tr)
        self.main.query_one("#params", Static).update(panels.params(tr, now, w - 4 if self.compact else third,
                                                               meta_first=self.compact))
        self.main.query_one("#tuner", Static).update(panels.tuner(tr, now, third))
        self.main.query_one("#ranking", Static).update(panels.ranking(tr, width=third))
        events = self.main.query_one("#events", Static)
        events.update(panels.events(tr, max(1, events.size.height - 2 if events.size.height else 8), w - 4))

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
        table = self.main.query_one(TenantTable)
        if table.row_count:
            table.move_cursor(row=(table.cursor_row + step) % table.row_count)
            self.render_all()

    def on_data_table_row_highlighted(self, _: Any) -> None:
        self.render_all()

    async def on_unmount(self) -> None:
        await self.source.aclose()
