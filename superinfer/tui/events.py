"""The dashboard's event log: deduplicated, bounded, newest last.

Sources: KV rotations (``rotation_events`` of ``/v1/state`` overlap from one poll to the next and list
only the last 20, so each event is keyed by ``(time, sim_time_s, kind, req_id)`` and seen once; totals
come from the counters, which see every rotation), shed requests (from each tenant's ``shed`` totals, merged
like rotations), parameter changes, restarts, disconnects, status changes and tuner decisions. An event repeating the previous one's text is counted (``×N``) instead of
added; rotations arriving within :data:`ROTATION_MERGE_S` of the latest rotation entry are merged into
it (even past other events: each line shows when its span started) (up to :data:`ROTATION_SPAN_S` per line), so a busy engine yields one line a minute instead of one
per poll.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROTATION_MERGE_S = 15.0  # a rotation this soon after the previous rotation line joins it...
ROTATION_SPAN_S = 60.0  # ...unless that line already spans this long
MAX_SEEN = 4096


@dataclass
class Event:
    """One log line. ``seq`` increases by one per event added (for ``--json`` streaming)."""

    seq: int
    t: float
    kind: str  # rotation, shed, params, restart, disconnect, reconnect, status, tuner, counters, info
    text: str
    level: str = "info"  # info, warn, error
    count: int = 1
    t_last: float = 0.0
    tally: Counter = field(default_factory=Counter)  # rotations: swap_out, swap_in, recompute, tenant:<name>
    hidden: int = 0  # rotations counted but not in the daemon's event list

    def render(self) -> str:
        if self.kind == "rotation":
            return _rotation_text(self.tally, self.hidden, self.t_last - self.t)
        return self.text + (f" (×{self.count})" if self.count > 1 else "")

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "t": self.t, "t_last": self.t_last or self.t, "kind": self.kind,
                "level": self.level, "text": self.render(), "count": self.count}


def _rotation_text(tally: Counter, hidden: int, span_s: float) -> str:
    moves = [f"{tally[k]} {label}" for k, label in (("swap_out", "out"), ("swap_in", "in"),
                                                   ("recompute", "recompute")) if tally[k]]
    tenants = sorted(((n, k[7:]) for k, n in tally.items() if k.startswith("tenant:")), reverse=True)
    text = (f"KV rotations in {span_s:.0f}s: " if span_s >= 1 else "KV rotations: ") + (", ".join(moves) or "none listed")
    if tenants:
        text += " (" + ", ".join(f"{name} {n}" for n, name in tenants[:3]) + ")"
    if hidden:
        text += f", {hidden} not in the daemon's last-20 list"
    return text


class EventLog:
    """Bounded log (``maxlen`` events) with the dedup rules of the module docstring."""

    def __init__(self, maxlen: int = 2000) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self.events: deque[Event] = deque(maxlen=maxlen)
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._seq = 0

    def __len__(self) -> int:
        return len(self.events)

    def add(self, t: float, kind: str, text: str, level: str = "info") -> Event:
        """Log ``text``; the same kind and text as the newest event only counts it again."""
        last = self.events[-1] if self.events else None
        if last is not None and last.kind == kind and last.text == text:
            last.count += 1
            last.t_last = t
            return last
        self._seq += 1
        ev = Event(self._seq, t, kind, text, level, t_last=t)
        self.events.append(ev)
        return ev

    def rotations(self, t: float, listed: list[dict[str, Any]], totals: dict[str, int] | None = None,
                  log: bool = True) -> int:
        """Record a poll's ``rotation_events`` (only the unseen ones count) and, when the counters are
        known, ``totals`` (``swap_out``/``swap_in``/``recompute`` since the previous poll). Returns how
        many listed events were new. ``log=False`` only marks them seen."""
        tally: Counter = Counter()
        new = 0
        for e in listed:
            if not isinstance(e, dict):
                continue
            key = (e.get("time"), e.get("sim_time_s"), e.get("kind"), e.get("req_id"))
            if key in self._seen:
                continue
            self._seen[key] = None
            if len(self._seen) > MAX_SEEN:
                self._seen.popitem(last=False)
            new += 1
            tally[str(e.get("kind"))] += 1
            if e.get("kind") in ("swap_out", "recompute"):
                tally["tenant:" + str(e.get("tenant"))] += 1
        hidden = 0
        if not log:
            return new
        if totals is not None:
            for k in ("swap_out", "swap_in", "recompute"):
                hidden += max(0, totals.get(k, 0) - tally[k])
                tally[k] = max(tally[k], totals.get(k, 0))
        if not any(tally[k] for k in ("swap_out", "swap_in", "recompute")):
            return new
        last = next((e for e in reversed(self.events) if e.kind == "rotation"), None)
        if last is not None and t - last.t_last <= ROTATION_MERGE_S and t - last.t < ROTATION_SPAN_S:
            last.tally.update(tally)
            last.hidden += hidden
            last.t_last = t
            return new
        self._seq += 1
        self.events.append(Event(self._seq, t, "rotation", "", "info", t_last=t, tally=tally, hidden=hidden))
        return new

    def tally(self, t: float, kind: str, counts: Counter, describe: Callable[[Counter, float], str],
              level: str = "info") -> Event:
        """Add ``counts`` to the newest ``kind`` event when it is recent (the rotation merge rules of the module
        docstring), else start one; its text is ``describe(tally, span_s)``."""
        last = next((e for e in reversed(self.events) if e.kind == kind), None)
        if last is not None and t - last.t_last <= ROTATION_MERGE_S and t - last.t < ROTATION_SPAN_S:
            last.tally.update(counts)
            last.t_last = t
            last.text = describe(last.tally, t - last.t)
            return last
        self._seq += 1
        ev = Event(self._seq, t, kind, describe(counts, 0.0), level, t_last=t, tally=Counter(counts))
        self.events.append(ev)
        return ev

    def forget_seen(self) -> None:
        """A restarted daemon starts its event list afresh."""
        self._seen.clear()

    def recent(self, n: int) -> list[Event]:
        return list(self.events)[-n:] if n > 0 else []

    def since(self, seq: int) -> list[Event]:
        """Events added after ``seq`` or changed since (merged rotations, repeats)."""
        return [e for e in self.events if e.seq > seq]
