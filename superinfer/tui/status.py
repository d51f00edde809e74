"""The header line (identity, status, uptime, data age) and the banner line under it (disconnected,
paused, the latest message, read-only and why). Pure functions of the tracker and the session."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from superinfer.tui.fmt import DASH, duration, secs
from superinfer.tui.tracker import Tracker

STATUS_STYLE = {"ok": "bold green", "starting": "bold yellow", "draining": "bold yellow", "stalled": "bold red",
                "failed": "bold red"}


@dataclass
class Session:
    """What the header and banner need besides the tracker."""

    url: str = ""
    interval_s: float = 1.0
    paused: bool = False
    read_only_reason: str | None = None
    replay: bool = False
    replay_ended: bool = False
    message: str = ""
    message_level: str = "info"
    message_until: float = 0.0


def header(tr: Tracker, now: float, ses: Session, width: int = 120) -> Text:
    """Identity and liveness in one line; the title and the URL only when ``width`` allows."""
    s = tr.state or {}
    out = Text(no_wrap=True, overflow="ellipsis")
    if width >= 140:
        out.append("superinferd top ", style="bold")
    if s.get("simulation"):
        out.append(" SIMULATION ", style="bold reverse magenta")
        out.append(" ")
    if ses.read_only_reason is not None:
        out.append(" READ-ONLY ", style="reverse dim")
        out.append(" ")
    if ses.replay:
        out.append(" REPLAY ", style="bold reverse cyan")
        out.append(" ")
    status = str(s.get("status") or DASH)
    out.append(status, style=STATUS_STYLE.get(status, "bold"))
    out.append(" · up ", style="dim")
    out.append(duration(s.get("uptime_s")))
    out.append(" · data ", style="dim")
    age = None if tr.t is None else max(0.0, now - tr.t)
    out.append(secs(age) if age is not None else DASH, style="red" if age is not None and age > 3 * ses.interval_s
               else "")
    out.append(" · poll ", style="dim")
    out.append(f"{ses.interval_s:g}s")
    out.append(" · ")
    out.append(str(s.get("backend") or DASH), style="bold")
    out.append(" · profile ", style="dim")
    out.append(str(s.get("profile") or DASH))
    out.append(" · ")
    out.append(str(s.get("model") or DASH))
    url = " · " + ses.url.removeprefix("http://")
    if ses.url and out.cell_len + len(url) <= width - 2:
        out.append(url, style="dim")
    return out


def banner(tr: Tracker, now: float, ses: Session) -> tuple[Text, str]:
    """(text, CSS class): ``disconnected``, ``paused``, ``message-<level>`` or ``idle``."""
    if not tr.connected and tr.lost_since is not None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f" DISCONNECTED {now - tr.lost_since:.0f}s ", style="bold reverse red")
        t.append(f" {tr.lost_reason}")
        if tr.retry_at is not None:
            t.append(f", retrying in {max(0.0, tr.retry_at - now):.0f}s")
        if tr.state is not None:
            t.append(" · last frame shown dimmed", style="dim")
        return t, "disconnected"
    if ses.replay_ended:
        return Text(" REPLAY ENDED: last recorded frame · q quits ", style="bold"), "paused"
    if ses.paused:
        return Text(" PAUSED · space resumes · r polls once ", style="bold"), "paused"
    if ses.message and now < ses.message_until:
        return Text(ses.message, no_wrap=True, overflow="ellipsis"), f"message-{ses.message_level}"
    if tr.state is None:
        return Text(f"connecting to {ses.url or 'the daemon'} ...", style="dim"), "idle"
    if ses.read_only_reason is not None:
        return Text(f"read-only: {ses.read_only_reason}", style="dim", no_wrap=True, overflow="ellipsis"), "idle"
    return Text("? help · e edit a param · f freeze the tuner · l log · s save · space pause", style="dim"), "idle"
