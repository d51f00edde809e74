"""The dashboard's widgets, one per panel: each draws itself from the tracker with ``show(tracker, now)``.

What a panel shows is a pure function in :mod:`~superinfer.tui.panels` (or :mod:`~superinfer.tui.status`);
the widget picks its width and puts the result on screen. Widths follow the terminal, not the widget's
own size: a third of the terminal in the wide layout, half (or all of it, for params) in the compact one.
The compact layout is the ``compact`` class the app sets on ``#body`` (the CSS hides panels by it too).
The tenant panel is in :mod:`~superinfer.tui.tenants`.
"""

from __future__ import annotations

from typing import Any, Protocol

from textual.widgets import Static

from superinfer.tui import panels
from superinfer.tui.status import Session, banner, header
from superinfer.tui.tracker import Tracker


class Shows(Protocol):
    """A widget that redraws itself from the tracker at time ``now``."""

    def show(self, tr: Tracker, now: float) -> None: ...


def compact(widget: Static) -> bool:
    """Whether ``widget`` sits in the compact layout (an ancestor has the ``compact`` class)."""
    return any(node.has_class("compact") for node in widget.ancestors)


class HeaderBar(Static):
    """The header line: identity, status, uptime, data age (:func:`~superinfer.tui.status.header`)."""

    def __init__(self, session: Session, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session

    def show(self, tr: Tracker, now: float) -> None:
        self.update(header(tr, now, self.session, self.app.size.width))


class Banner(Static):
    """The line under the header: disconnected, paused, a message or read-only; its CSS class says which."""

    def __init__(self, session: Session, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session

    def show(self, tr: Tracker, now: float) -> None:
        text, cls = banner(tr, now, self.session)
        self.update(text)
        self.set_classes(cls)


class Panel(Static):
    """A bordered panel titled :attr:`TITLE`."""

    TITLE = ""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(classes="panel", **kwargs)
        self.border_title = self.TITLE

    @property
    def third(self) -> int:
        """A third of the terminal's width, less the borders (at least 24)."""
        return max(24, self.app.size.width // 3 - 4)

    def show(self, tr: Tracker, now: float) -> None:
        raise NotImplementedError


class KvPanel(Panel):
    """HBM and DRAM use; the title gives the block size."""

    TITLE = "KV cache"

    def show(self, tr: Tracker, now: float) -> None:
        self.update(panels.kv(tr, self.app.size.width // 2 - 4 if compact(self) else self.third))
        self.border_title = panels.kv_title(tr)


class QueuesPanel(Panel):
    """Waiting / rotary / running with sparklines, and the rates."""

    TITLE = "queues"

    def show(self, tr: Tracker, now: float) -> None:
        self.update(panels.queues(tr, self.app.size.width // 2 - 4 if compact(self) else self.third))


class TransferPanel(Panel):
    """GB/s each way against the probe's peak; the subtitle says what the peak is on the twin."""

    TITLE = "transfer"

    def show(self, tr: Tracker, now: float) -> None:
        self.update(panels.transfer(tr, self.third))
        self.border_subtitle = panels.transfer_note(tr)


class ParamsPanel(Panel):
    """Every knob with version, source and age (those first in the compact layout)."""

    TITLE = "params"

    def show(self, tr: Tracker, now: float) -> None:
        small = compact(self)
        self.update(panels.params(tr, now, self.app.size.width - 4 if small else self.third, meta_first=small))


class TunerPanel(Panel):
    """The online tuner: mode, state, candidate, last decision, frozen, budget."""

    TITLE = "tuner"

    def show(self, tr: Tracker, now: float) -> None:
        self.update(panels.tuner(tr, now, self.third))


class RankingPanel(Panel):
    """The top of the last plan's VLT ranking."""

    TITLE = "VLT ranking (served first)"

    def show(self, tr: Tracker, now: float) -> None:
        self.update(panels.ranking(tr, width=self.third))


class EventsPanel(Panel):
    """The newest events, as many as the panel's height holds (8 before it has a size)."""

    TITLE = "events"

    def show(self, tr: Tracker, now: float) -> None:
        height = self.size.height
        self.update(panels.events(tr, max(1, height - 2 if height else 8), self.app.size.width - 4))
