"""The tuner panel's last lines: rollbacks in the last hour, jumps, and the exploration budget (what the
local steps lost in the last hour against the allowance; yellow once spent); older daemons without these
fields show only the rollbacks."""

from __future__ import annotations

from rich.console import Console

from superinfer.tui import panels
from superinfer.tui.tracker import Tracker
from tests.tui.builders import state

TUNER = {"mode": "auto", "state": "observe", "frozen": False, "frozen_reason": None, "incumbent": {},
         "candidate": None, "phase": "chat", "last_decisions": [], "rollbacks_last_hour": 1}


def render(tuner: dict, width: int = 36) -> tuple[str, list[str]]:
    tr = Tracker()
    tr.observe(state(tuner=tuner), 1000.0)
    console = Console(width=width, record=True, color_system="truecolor")
    console.print(panels.tuner(tr, 1000.0, width=width))
    text = console.export_text()
    styles = [str(seg.style) for seg in console.render(panels.tuner(tr, 1000.0, width=width)) if "loss" in seg.text]
    return text, styles


def test_jumps_and_the_exploration_budget_are_shown() -> None:
    text, styles = render(dict(TUNER, jumps=2, exploration_budget={
        "share": 0.01, "allowance": 36.0, "spent_last_hour": 12.5, "local_steps_allowed": True}))
    assert "rollbacks/h 1 · jumps 2" in text and "local-step loss 12.5/36 s" in text
    assert styles and all("yellow" not in s for s in styles)


def test_a_spent_budget_is_yellow() -> None:
    _, styles = render(dict(TUNER, jumps=0, exploration_budget={
        "share": 0.01, "allowance": 36.0, "spent_last_hour": 40.0, "local_steps_allowed": False}))
    assert any("yellow" in s for s in styles)


def test_an_older_daemon_shows_only_the_rollbacks() -> None:
    text, _ = render(TUNER)
    last = [line for line in text.splitlines() if "rollbacks/h" in line][0]
    assert last.strip() == "rollbacks/h 1"
