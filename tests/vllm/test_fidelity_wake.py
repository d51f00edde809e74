"""The arrival and wake probes' loop (no engine): idling as the replay idles, and the terms that can be measured
again."""

from __future__ import annotations

import time

import pytest

from superinfer.bench.fidelity import wake as fw


class _Engine:
    """Counts the idle loop's checks; has work once ``busy_after`` checks were made (never if None)."""

    def __init__(self, busy_after: int | None = None) -> None:
        self.checks = 0
        self.busy_after = busy_after

    def has_unfinished_requests(self) -> bool:
        self.checks += 1
        return self.busy_after is not None and self.checks > self.busy_after


def test_idling_sleeps_in_the_replays_slices_until_the_arrival() -> None:
    eng = _Engine()
    t0 = time.perf_counter()
    fw._sleep_until(eng, t0 + 0.05)
    elapsed = time.perf_counter() - t0
    assert 0.05 <= elapsed < 0.2, elapsed
    # slices of at most SLEEP_SLICE_S: at least 0.05 / 0.01 checks, and one more that sees the time is up
    assert eng.checks >= round(0.05 / fw.SLEEP_SLICE_S), eng.checks


def test_idling_stops_when_the_engine_has_work() -> None:
    eng = _Engine(busy_after=1)
    t0 = time.perf_counter()
    fw._sleep_until(eng, t0 + 1.0)
    assert time.perf_counter() - t0 < 0.5 and eng.checks == 2


def test_an_arrival_already_due_does_not_sleep() -> None:
    eng = _Engine()
    t0 = time.perf_counter()
    fw._sleep_until(eng, t0 - 1.0)
    assert time.perf_counter() - t0 < 0.005


def test_only_the_arrival_wake_and_shape_terms_can_be_measured_again() -> None:
    assert set(fw.REMEASURABLE) == {"host_arrival", "host_wake", "shape_capacity"}
    with pytest.raises(ValueError, match="host_step"):
        fw.measure(object(), 100, ("host_step",), 510, 2048)
