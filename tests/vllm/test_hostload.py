"""The host conditions a real-engine benchmark records: real-time throttling (``rt_throttle``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from superinfer.bench.engine.hostload import rt_throttle

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="Linux scheduling policies")


def _proc(tmp_path: Path, runtime: str, period: str = "1000000") -> Path:
    (tmp_path / "sched_rt_runtime_us").write_text(runtime + "\n")
    (tmp_path / "sched_rt_period_us").write_text(period + "\n")
    return tmp_path


def test_a_real_time_process_is_stopped_for_the_rest_of_each_period(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "950000")
    assert rt_throttle(os.SCHED_FIFO, proc) == pytest.approx(0.05)
    assert rt_throttle(os.SCHED_RR, proc) == pytest.approx(0.05)


def test_an_ordinary_process_or_throttling_off_is_not_throttled(tmp_path: Path) -> None:
    assert rt_throttle(os.SCHED_OTHER, _proc(tmp_path, "950000")) is None
    assert rt_throttle(os.SCHED_FIFO, _proc(tmp_path, "-1")) is None
    assert rt_throttle(os.SCHED_FIFO, _proc(tmp_path, "1000000")) is None


def test_unreadable_settings_are_not_a_throttle(tmp_path: Path) -> None:
    assert rt_throttle(os.SCHED_FIFO, tmp_path / "missing") is None
    assert rt_throttle(os.SCHED_FIFO, _proc(tmp_path, "lots")) is None


def test_this_test_process_reports_its_own_policy() -> None:
    expected = None if os.sched_getscheduler(0) not in (os.SCHED_FIFO, os.SCHED_RR) else rt_throttle(os.SCHED_FIFO)
    assert rt_throttle() == expected
