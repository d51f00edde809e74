"""Number and time formatting, sparklines and bars, shared by the panels. Unknown values are "—"."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from superinfer.tui.judge import BREACH, OK, UNJUDGED, WARN

DASH = "—"
SPARKS = "▁▂▃▄▅▆▇█"
VERDICT_STYLE = {OK: "bold green", WARN: "bold yellow", BREACH: "bold red", UNJUDGED: "dim"}
VERDICT_MARK = {OK: "●", WARN: "▲", BREACH: "✖", UNJUDGED: "·"}


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def pct(x: Any, digits: int = 1) -> str:
    """A share as a percentage ("93.3%"); 100 % prints without decimals."""
    if not is_num(x):
        return DASH
    if x >= 1.0:
        return "100%"
    return f"{100 * x:.{digits}f}%"


def secs(x: Any) -> str:
    """Seconds, with a unit that suits: "48ms", "3.15s", "2m05s"."""
    if not is_num(x):
        return DASH
    if abs(x) < 1:
        return f"{x * 1000:.0f}ms"
    if abs(x) < 60:
        return f"{x:.2f}s" if abs(x) < 10 else f"{x:.1f}s"
    return duration(x)


def slo(x: Any) -> str:
    """An SLO, short: "5s", "1.5s", "150ms", "2m"."""
    if not is_num(x):
        return DASH
    if x < 1:
        return f"{x * 1000:.0f}ms"
    if x < 60:
        return f"{x:g}s"
    return f"{x / 60:g}m"


def duration(s: Any) -> str:
    """An uptime or age: "42s", "3m05s", "2h04m", "3d02h"."""
    if not is_num(s):
        return DASH
    s = max(0, int(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def number(x: Any) -> str:
    """A knob or counter: integers as they are, floats with up to 4 significant digits."""
    if isinstance(x, bool) or x is None:
        return DASH if x is None else str(x).lower()
    if isinstance(x, int):
        return str(x)
    if is_num(x):
        return str(int(x)) if x == int(x) and abs(x) < 1e15 else f"{x:.4g}"
    return DASH


def gib(blocks: Any, block_bytes: Any) -> str:
    if not (is_num(blocks) and is_num(block_bytes)):
        return DASH
    v = blocks * block_bytes / (1 << 30)
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def clock(t: Any) -> str:
    """Local wall-clock time "HH:MM:SS"."""
    return time.strftime("%H:%M:%S", time.localtime(t)) if is_num(t) else DASH


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= ``x`` (1 for x <= 1)."""
    if not is_num(x) or x <= 1:
        return 1.0
    mag = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * mag >= x:
            return float(m * mag)
    return float(10 * mag)


def spark(values: Sequence[float], hi: float, width: int, lo: float = 0.0) -> str:
    """The newest ``width`` values on the fixed scale [lo, hi], left-padded with spaces."""
    if width <= 0:
        return ""
    vals = list(values)[-width:]
    span = hi - lo if hi > lo else 1.0
    out = []
    for v in vals:
        frac = min(max((v - lo) / span, 0.0), 1.0)
        out.append(" " if v <= lo else SPARKS[min(int(frac * len(SPARKS)), len(SPARKS) - 1)])
    return " " * (width - len(vals)) + "".join(out)


def bar(share: Any, width: int) -> str:
    """A horizontal bar of ``width`` cells, ``share`` of them full."""
    if width <= 0:
        return ""
    if not is_num(share):
        return "·" * width
    full = round(min(max(share, 0.0), 1.0) * width)
    return "█" * full + "░" * (width - full)


def share_style(share: Any) -> str:
    """Colour of a fill level: red from 95 %, yellow from 80 %."""
    if not is_num(share):
        return "dim"
    return "red" if share >= 0.95 else "yellow" if share >= 0.8 else "green"


def fit(text: Text, width: int) -> Text:
    """``text`` with every line cut to ``width`` cells (an ellipsis marks a cut), so a panel never wraps."""
    if width <= 0:
        return text
    lines = text.split("\n", allow_blank=True)
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    return Text("\n").join(lines)
