"""The dashboard's key actions that talk to the daemon or open dialogs: edit a param, freeze the tuner,
the full log, help, save the state. A mixin of :class:`~superinfer.tui.app.TopApp` (it uses the app's
``tracker``, ``source``, ``session``, ``say``, ``now`` and ``_wake``)."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.text import Text

from superinfer.tui import panels
from superinfer.tui.client import ApiError, Unreachable
from superinfer.tui.dialogs import ConfirmScreen, EditScreen, HelpScreen, LogScreen
from superinfer.tui.fmt import clock


class Actions:
    """``e``, ``f``, ``l``, ``?``, ``s``."""

    tracker: Any
    source: Any
    session: Any
    save_dir: Any
    _bounds: Any
    _wake: Any

    def action_edit(self) -> None:
        if self.tracker.state is None or not self.tracker.connected or self.source.client is None:
            self.say("not connected: nothing to edit", "error")
            return
        self.run_worker(self._edit(), exclusive=True, group="edit")

    async def _edit(self) -> None:
        client = self.source.client
        try:
            if self._bounds is None:
                self._bounds = await self.source.bounds()
            params = await client.params()
        except (Unreachable, ApiError) as exc:
            self.say(f"cannot read params: {exc}", "error")
            return
        self.push_screen(EditScreen(params, self._bounds, client.params, client.put_params), self._edited)

    def _edited(self, result: tuple[str, str] | None) -> None:
        if result is None:
            self.say("edit cancelled: nothing sent")
        else:
            self.say(result[1], result[0])
            self._wake.set()

    def action_freeze(self) -> None:
        t = self.tracker.tuner
        if t is None:
            self.say("the tuner is not available: this daemon has no /v1/tuner and /v1/state has no tuner "
                     "block (the panel says off)", "warn")
            return
        frozen = bool(t.get("frozen"))
        question = ("Unfreeze the tuner (it resumes changing params)?" if frozen else
                    "Freeze the tuner (it stops changing params until unfrozen)?")
        self.push_screen(ConfirmScreen(question), lambda yes: self._freeze(not frozen) if yes else
                         self.say("nothing sent"))

    def _freeze(self, freeze: bool) -> None:
        async def go() -> None:
            try:
                status = await self.source.client.put_tuner({"freeze": freeze})
            except ApiError as exc:
                self.say(f"tuner refused, HTTP {exc.status}: {exc.message}", "error")
                return
            except Unreachable as exc:
                self.say(f"daemon unreachable: {exc.reason}", "error")
                return
            frozen = bool(status.get("frozen")) if isinstance(status, dict) else freeze
            if frozen == freeze:
                self.say("tuner frozen" if freeze else "tuner unfrozen")
            else:  # the tuner's own guards decide too (e.g. it freezes itself under low load)
                self.say(f"sent; the tuner is {'frozen' if frozen else 'not frozen'}: "
                         f"{status.get('frozen_reason') or 'no reason given'}", "warn")
            self._wake.set()

        self.run_worker(go(), exclusive=True, group="freeze")

    def action_log(self) -> None:
        text = Text()
        for e in self.tracker.events.events:
            text.append(clock(e.t) + (f"–{clock(e.t_last)}" if e.t_last and e.t_last - e.t >= 1 else "") + " ",
                        style="dim")
            text.append(e.render() + "\n", style=panels.EVENT_STYLE.get(e.level, ""))
        self.push_screen(LogScreen(text or Text("no events yet", style="dim")))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_save(self) -> None:
        if self.tracker.state is None:
            self.say("nothing to save yet", "error")
            return
        now = self.now()
        path = self.save_dir / f"superinfer-state-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}.json"
        doc = {"saved_at": now, "url": self.session.url, "state": self.tracker.state,
               "derived": self.tracker.derived(now)}
        try:
            path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        except OSError as exc:
            self.say(f"cannot save: {exc.strerror or exc}", "error")
            return
        self.say(f"saved {path}")
