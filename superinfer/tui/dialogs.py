"""Modal screens: edit a parameter, yes/no confirmation, help, and the full event log.

The edit dialog checks the type locally (a number; an integer for integer knobs) and shows the bounds the
daemon's OpenAPI schema declares (a value outside them is flagged before sending, but the daemon decides:
its 422 message is shown as it is). Sending needs a confirmation showing old → new; just before the PUT
it reads ``/v1/params`` again, and if someone else changed them since the dialog opened, it shows what
changed and asks again before overwriting.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from superinfer.tui.client import ApiError, Bound, Unreachable
from superinfer.tui.fmt import clock, number
from superinfer.tui.tracker import knobs


def parse_value(text: str, current: Any, bound: Bound | None) -> tuple[float | int | None, str, str]:
    """(value, error, warning) for the text typed for a knob whose value is ``current``. ``error``
    blocks sending (not a number, a fraction for an integer knob); ``warning`` does not (out of bounds)."""
    text = text.strip()
    integer = bound.integer if bound is not None else isinstance(current, int) and not isinstance(current, bool)
    try:
        v = float(text)
    except ValueError:
        return None, f"not a number: {text!r}" if text else "type a value", ""
    if not math.isfinite(v):
        return None, "must be a finite number", ""
    value: float | int = v
    if integer:
        if v != int(v):
            return None, "must be an integer", ""
        value = int(v)
    warning = ""
    if bound is not None and ((bound.lo is not None and v < bound.lo) or (bound.hi is not None and v > bound.hi)):
        warning = (f"outside [{number(bound.lo)}, {number(bound.hi)}] declared by the daemon: "
                   "it will refuse it (422)")
    return value, "", warning


class EditScreen(ModalScreen[tuple[str, str] | None]):
    """Pick a knob, type a value, confirm; dismisses with (level, message): ("info", "alpha 3 → 4 (params
    v5)") when sent, ("error", the refusal) when cancelled after one, None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("y", "yes", "yes", show=False),
                Binding("n", "cancel", "no", show=False)]

    def __init__(self, params: dict[str, Any], bounds: dict[str, Bound],
                 fetch: Callable[[], Awaitable[dict[str, Any]]],
                 send: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> None:
        super().__init__()
        self.params = dict(params)
        self.bounds = bounds
        self.fetch, self.send = fetch, send
        self.key: str | None = None
        self.value: float | int | None = None
        self.stage = "pick"  # pick, type, confirm, conflict, sending
        self.error = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(f"Edit a scheduler parameter (live: v{self.params.get('version')})", style="bold"))
            opts = []
            for k, v in knobs(self.params).items():
                b = self.bounds.get(k)
                rng = f"  [{number(b.lo)}, {number(b.hi)}]{' int' if b.integer else ''}" if b else ""
                opts.append(Option(Text.assemble((k, "bold"), f" = {number(v)}", (rng, "dim")), id=k))
            yield OptionList(*opts, id="knobs")
            yield Input(placeholder="new value", id="value", disabled=True)
            yield Static("", id="preview")
            yield Static(Text("↑↓ pick · enter: next · esc: cancel", style="dim"), id="hint")

    def on_mount(self) -> None:
        knobs_list = self.query_one("#knobs", OptionList)
        knobs_list.highlighted = 0
        knobs_list.focus()

    def _hint(self, text: str) -> None:
        self.query_one("#hint", Static).update(Text(text, style="dim"))

    def _show(self, text: str, style: str = "") -> None:
        self.query_one("#preview", Static).update(Text(text, style=style))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.key = event.option.id
        b = self.bounds.get(self.key or "")
        inp = self.query_one("#value", Input)
        inp.disabled = False
        inp.placeholder = f"new {self.key}" + (f" in [{number(b.lo)}, {number(b.hi)}]" if b else "")
        inp.focus()
        self.stage = "type"
        self._hint("type the new value · enter: review · esc: cancel")
        self._show(f"{self.key}: {number(self.params.get(self.key))} → ?")

    def on_input_changed(self, event: Input.Changed) -> None:
        if self.key is None:
            return
        value, error, warning = parse_value(event.value, self.params.get(self.key), self.bounds.get(self.key))
        if error:
            self._show(f"{self.key}: {error}", "red")
        else:
            self._show(f"{self.key}: {number(self.params.get(self.key))} → {number(value)}"
                       + (f"  ({warning})" if warning else ""), "yellow" if warning else "")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.key is None:
            return
        value, error, warning = parse_value(event.value, self.params.get(self.key), self.bounds.get(self.key))
        if error:
            self._show(f"{self.key}: {error}", "red")
            return
        self.value = value
        self.stage = "confirm"
        self.query_one("#value", Input).disabled = True
        self.set_focus(None)
        self._hint("y / enter: send · n / esc: cancel")
        self._show(f"Send {self.key} {number(self.params.get(self.key))} → {number(value)}?"
                   + (f"\n{warning}" if warning else ""), "bold yellow" if warning else "bold")

    def key_enter(self) -> None:
        if self.stage in ("confirm", "conflict"):
            self.action_yes()

    def action_cancel(self) -> None:
        if self.stage != "sending":
            self.dismiss(("error", f"not changed: {self.error}") if self.error else None)

    def action_yes(self) -> None:
        if self.stage in ("confirm", "conflict"):
            self.run_worker(self._send(force=self.stage == "conflict"), exclusive=True, group="edit")

    async def _send(self, force: bool) -> None:
        key = self.key
        if key is None or self.value is None:
            return
        stage, self.stage = self.stage, "sending"
        self._show("sending ...", "dim")
        try:
            if not force:
                now = await self.fetch()
                if now.get("version") != self.params.get("version"):
                    old, new = knobs(self.params), knobs(now)
                    diff = ", ".join(f"{k} {number(old.get(k))} → {number(v)}" for k, v in new.items()
                                     if old.get(k) != v) or "no value changed"
                    self.params = now
                    self.stage = "conflict"
                    self._show(f"Changed meanwhile: v{now.get('version')} by {now.get('source')} at "
                               f"{clock(now.get('updated_at'))}: {diff}.\nOverwrite {key} "
                               f"(now {number(now.get(key))}) with {number(self.value)}? y / n",
                               "bold yellow")
                    return
            result = await self.send({key: self.value})
        except ApiError as exc:
            self.stage = "type"
            inp = self.query_one("#value", Input)
            inp.disabled = False
            inp.focus()
            self.error = f"refused, HTTP {exc.status}: {exc.message}"
            self._show(self.error, "bold red")
            return
        except Unreachable as exc:
            self.stage = stage
            self._show(f"daemon unreachable ({exc.reason}); y retries, esc cancels", "bold red")
            return
        self.dismiss(("info", f"{key} {number(self.params.get(key))} → {number(result.get(key))} "
                              f"(params v{result.get('version')})"))


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismisses with True only on y/enter."""

    BINDINGS = [Binding("y,enter", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(self.question, style="bold"))
            yield Static(Text("y / enter: yes · n / esc: no", style="dim"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


HELP = "\n".join([
    "q quit · space or Z pause/resume · r poll now · + / - poll interval",
    "tab / shift+tab or ↑ ↓ choose a tenant (its \"why\" line is under the table)",
    "e edit a scheduler parameter: type and bounds checked, old → new confirmed, sent with the API token",
    "f freeze / unfreeze the online tuner (confirmed)",
    "l the full event log · s save the current state JSON in the working directory · ? this help",
    "",
    "Verdicts: BREACH below the target attainment T (the daemon's tuner.target_attainment), WARN from T up to "
    "halfway to 100 %, OK above; a tenant's word is the worse of its TTFT and both-SLO attainment. A window with "
    "fewer than 10 requests (100 gaps) is not judged: \"—\". P50 over the SLO is red, P99 over it yellow.",
    "Sparklines have fixed tops: running's is max_num_seqs; the others grow in 1-2-5 steps and never shrink.",
    "Read-only (--read-only, or no readable token) greys out e and f.",
])


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text("superinferd top: keys", style="bold"))
            yield Static(HELP)

    def action_close(self) -> None:
        self.dismiss(None)


class LogScreen(ModalScreen[None]):
    """Every event the session kept, newest last."""

    BINDINGS = [Binding("escape,q,l", "close", "close")]

    def __init__(self, lines: Text) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="log"):
            yield Static(self.lines)

    def on_mount(self) -> None:
        log = self.query_one("#log", VerticalScroll)
        log.border_title = "event log (oldest first) · ↑↓ scroll · esc closes"
        log.scroll_end(animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
