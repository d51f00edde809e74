"""The daemon's event loop, watched (superinfer.daemon.loop_health): the lag histogram measures what a blocked
loop made a timer wait, and a stall is logged once, with the stack of what held the loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from superinfer.daemon.loop_health import StallWatch, watch_loop_lag


def block_the_loop_in_a_handler(seconds: float) -> None:
    time.sleep(seconds)  # a synchronous call on the loop: every request in flight waits


def run_watched(blocks: list[float], threshold_s: float = 0.3) -> tuple[list[float], list[tuple[float, str]]]:
    """Run the lag sampler (beating a StallWatch) while a coroutine blocks the loop for each of ``blocks`` in
    turn, 0.15 s apart: (lags sampled, stalls reported)."""
    lags: list[float] = []
    reports: list[tuple[float, str]] = []

    async def go() -> None:
        watch = StallWatch(threshold_s=threshold_s, check_every_s=0.02, report=lambda s, st: reports.append((s, st)))
        sampler = asyncio.create_task(watch_loop_lag(lags.append, every_s=0.01, beat=watch.beat))
        for seconds in blocks:
            await asyncio.sleep(0.15)
            block_the_loop_in_a_handler(seconds)
        await asyncio.sleep(0.15)
        sampler.cancel()
        watch.stop()

    asyncio.run(go())
    return lags, reports


def test_the_lag_is_what_a_blocked_loop_made_a_timer_wait() -> None:
    lags, _ = run_watched([0.2])
    assert max(lags) >= 0.15 and sorted(lags)[len(lags) // 2] < 0.05


def test_a_stall_is_reported_once_with_the_stack_that_held_the_loop() -> None:
    _, reports = run_watched([0.8])
    assert len(reports) == 1, reports
    late, stack = reports[0]
    assert 0.3 <= late < 0.8
    assert "block_the_loop_in_a_handler" in stack and "time.sleep(seconds)" in stack


def test_each_stall_is_reported_and_a_short_block_is_not() -> None:
    _, reports = run_watched([0.6, 0.05, 0.6])
    assert len(reports) == 2, [late for late, _ in reports]


def test_a_healthy_loop_reports_nothing() -> None:
    _, reports = run_watched([])
    assert reports == []


def test_nonsense_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="threshold_s"):
        StallWatch(threshold_s=0)
