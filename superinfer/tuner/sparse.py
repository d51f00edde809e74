"""Sparse traffic: how much arrival time a window needs to hold the evidence the tests need.

The tests (``superinfer.tuner.stats``) need decided requests, not seconds: a trial's verdict needs
``min_requests`` decided requests on each side (fewer: the trial is extended once, then it is
inconclusive), a baseline window as many. With a fixed ``window_s`` that count is ``rate x window_s``,
so at long-output rates (1-3 req/s per GPU) a 120 s window holds 120-360 arrivals and the tuner froze
(``low_load``) below 1.67 req/s. The rule here keeps the *evidence* fixed and lets the *time* vary:

* the window (a baseline window; each side's counted arrivals in a switchback trial) is
  ``HEADROOM x min_requests / rate``, never shorter than ``window_s`` and never longer than
  ``max_window_s``; ``rate`` is the recent arrival rate (the tracker's last ``window_s`` of feature
  slots), ``HEADROOM`` (1.25) covers the rate estimate's noise (about 7 % at 180 arrivals) and the
  requests still censored at the evaluation;
* a switchback trial keeps its ``switch_slots`` slots (the units of the slot-level test) and its
  per-slot warm-up; each slot's counted part is a ``switch_slots / 2``-th of the window, so a slot
  grows with the window (:func:`switch_s`);
* ``low_load`` freezes only when even ``max_window_s`` cannot be expected to hold ``min_requests``
  (``rate x max_window_s < min_requests``).

Why this and not fewer requests: the test, its level, its units (slots) and the sample size it sees are
the same at every rate, so its false-accept rate is the same as on dense traffic as far as the slots are
alike; only the time to a verdict grows as ``1 / rate`` (at the defaults, 1.5 req/s: a 167 s window,
a trial of 8 slots of 52 s, about 7 minutes; 0.3 req/s: the 900 s cap, about 32 minutes). What longer
slots cost: a drift within a slot is larger (the switchback's order still cancels linear trends over
4 slots), and a traffic change is likelier during a trial (it is aborted, as on dense traffic).
``max_window_s = window_s`` restores the fixed window (and the old freeze). Evidence from running
requests (token gaps, TTFT hits before the finish) would shorten the time further but changes the
objective's unit from requests to events; not done (docs/tuner.md, "Sparse traffic").
"""

from __future__ import annotations

import math

from superinfer.tuner.config import TunerConfig

HEADROOM = 1.25  # arrivals per needed decided request: the rate's noise and the censored requests


def window_for(cfg: TunerConfig, rate: float) -> float:
    """The window (seconds of counted arrivals) that holds ``HEADROOM x min_requests`` arrivals at
    ``rate`` req/s, clamped to ``[window_s, max_window_s]``; ``window_s`` while the rate is unknown."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise ValueError(f"window_for: expected a rate in req/s, got {rate!r}")
    if math.isnan(rate):
        return cfg.window_s
    if rate < 0:
        raise ValueError(f"window_for: expected a rate >= 0, got {rate!r}")
    if rate == 0:
        return cfg.max_window_s
    return min(max(cfg.window_s, HEADROOM * cfg.min_requests / rate), cfg.max_window_s)


def too_sparse(cfg: TunerConfig, rate: float) -> bool:
    """The ``low_load`` freeze: even the longest window (``max_window_s``) is not expected to hold
    ``min_requests`` arrivals at ``rate`` (False while the rate is unknown)."""
    if math.isnan(rate):
        return False
    return rate * cfg.max_window_s < cfg.min_requests


def switch_s(cfg: TunerConfig, window_s: float) -> float:
    """A switchback slot's length for a window of ``window_s``: the window split over the slots of
    one side, plus the per-slot warm-up (``TunerConfig.switch_s`` at ``window_s``)."""
    if not window_s > 0:
        raise ValueError(f"switch_s: expected a window > 0, got {window_s!r}")
    return window_s / (cfg.switch_slots // 2) + cfg.switch_warmup_s
