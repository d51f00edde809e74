"""The daemon's event loop, watched: every request in flight, every stream and ``/v1/state`` wait out a stall.

* :func:`watch_loop_lag` (a task on the loop): every ``every_s``, how much later than asked a sleep woke
  up, to ``superinfer_event_loop_lag_seconds``; each wake is also the loop's heartbeat.
* :class:`StallWatch` (a thread beside the loop): when no heartbeat has come for ``threshold_s``, it logs the
  loop thread's stack once for that stall (``event loop stalled 0.62 s so far; its thread is at: ...``), so
  an operator sees *what* held the loop, not only that something did. When the whole process is starved of
  CPU (an engine's threads on every core) the stack is wherever it was descheduled: the log says the loop's
  thread was running Python, and the lag histogram says how often.

Invariant: one report per stall (a stall ends at the next heartbeat).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable

log = logging.getLogger("superinfer.daemon")

LOOP_LAG_EVERY_S = 0.1  # how often the event loop's lag is sampled (superinfer_event_loop_lag_seconds)
STALL_S = 0.5  # a loop without a heartbeat this long is reported with its stack
STACK_FRAMES = 12  # innermost frames logged


async def watch_loop_lag(observe: Callable[[float], None], every_s: float = LOOP_LAG_EVERY_S,
                         beat: Callable[[], None] | None = None) -> None:
    """Every ``every_s``: how much later than asked a sleep woke up (the event loop's lag), to ``observe``;
    then ``beat()`` (the heartbeat a :class:`StallWatch` waits for)."""
    while True:
        t0 = time.monotonic()
        await asyncio.sleep(every_s)
        try:
            observe(max(0.0, time.monotonic() - t0 - every_s))
        except Exception:  # noqa: BLE001 - a metric's failure must not stop the heartbeat
            log.exception("event-loop lag: observing failed")
        if beat is not None:
            beat()


class StallWatch:
    """A thread that logs the loop thread's stack when :meth:`beat` has not been called for ``threshold_s``.
    Create it on the loop's thread (that thread is the one watched); :meth:`stop` ends the thread."""

    def __init__(self, threshold_s: float = STALL_S, check_every_s: float = 0.05,
                 report: Callable[[float, str], None] | None = None) -> None:
        if threshold_s <= 0 or check_every_s <= 0:
            raise ValueError(f"threshold_s and check_every_s must be > 0, got {threshold_s}, {check_every_s}")
        self.threshold_s, self.check_every_s = threshold_s, check_every_s
        self.beat_at = time.monotonic()
        self.stalls = 0
        self._report = report or _log_stall
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-stall-watch", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        self.beat_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        reported = None  # the heartbeat whose stall was reported
        while not self._stop.wait(self.check_every_s):
            beat_at = self.beat_at
            late = time.monotonic() - beat_at
            if late < self.threshold_s or reported == beat_at:
                continue
            reported = beat_at
            self.stalls += 1
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)[-STACK_FRAMES:]) if frame is not None else "(gone)\n"
            self._report(late, stack)


def _log_stall(late_s: float, stack: str) -> None:
    log.warning("event loop stalled %.2f s so far (requests, streams and the API all wait); its thread is at:\n%s",
                late_s, stack.rstrip())
