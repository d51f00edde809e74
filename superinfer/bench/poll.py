"""A ``/v1/state`` poller in a process of its own, as ``superinferd top`` would poll: its latencies are the
daemon's, not those of a load generator sharing an event loop (and a garbage collector) with it.

    stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
    p = ctx.Process(target=poll_state, args=(url, 0.2, stop, out, ready)); p.start()
    ready.wait(60)  # its interpreter has started and polled once: the start's CPU is not the load's
    ...; stop.set(); polls = out.get(timeout=60); p.join()

Each entry of the list put on ``out`` is ``(status, seconds)``; a transport error is status -1. The first
poll (made before ``ready`` is set) is not in it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any


def poll_state(url: str, every_s: float, stop: Any, out: Any, ready: Any = None) -> None:
    """GET ``url``/v1/state every ``every_s`` until ``stop`` is set; then put the list of (status, seconds).
    ``ready`` (an Event, optional) is set after a first poll, which is not counted."""
    import httpx

    polls: list[tuple[int, float]] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        with contextlib.suppress(httpx.HTTPError):
            client.get("/v1/state")
        if ready is not None:
            ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                status = client.get("/v1/state").status_code
            except httpx.HTTPError:
                status = -1
            polls.append((status, time.perf_counter() - t0))
            time.sleep(every_s)
    out.put(polls)
