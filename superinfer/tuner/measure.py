"""What the controller measures: request outcomes into windows (by arrival time), arrivals into
feature slots, and when a window may be evaluated.

A window is *evaluable* at ``now`` when ``now >= end + settle_s`` and either at most 2 % of its arrivals
are still censored (``superinfer.tuner.objective``: TTFT met and not finished, or no first token while
the tenant's S_F since the window's end has not passed) or ``now >= end + max_settle_s``.
Outcomes of requests that arrived outside every open window are dropped (warm-up, or a window already
evaluated); feature slots see every arrival.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from superinfer.tuner.objective import Score, Window
from superinfer.tuner.phase import FeatureSlot

CENSORED_OK = 0.02  # share of a window's arrivals that may still be undecided at evaluation
MIN_SLOT_ARRIVALS = 8  # arrivals a slot needs for its length and tenant features


class Measurements:
    """Open windows and the feature slots (``[origin + k slot_s, origin + (k + 1) slot_s)``, each arrival
    in the slot of its arrival time, closed in order once the clock passes their end). ``tenants``: name
    -> (ttft_slo_s, weight)."""

    def __init__(self, tenants: Mapping[str, tuple[float, float]], slot_s: float, settle_s: float,
                 max_settle_s: float, now: float) -> None:
        if not tenants:
            raise ValueError("measurements: at least one tenant is needed")
        self.weights = {t: float(w) for t, (_, w) in tenants.items()}
        self.ttft = {t: float(s) for t, (s, _) in tenants.items()}
        self.names = list(tenants)
        self.slot_s, self.settle_s, self.max_settle_s = float(slot_s), float(settle_s), float(max_settle_s)
        self.windows: list[Window] = []
        self.origin = float(now)
        self.next_close = 0  # index of the oldest slot not yet closed
        self.slots: dict[int, FeatureSlot] = {}
        self.arrivals_total = 0

    # ---- the feed -------------------------------------------------------------------------------
    def _window(self, t_arr: float) -> Window | None:
        for w in self.windows:
            if w.contains(t_arr):
                return w
        return None

    def arrival(self, t: float, tenant: str, prompt_tokens: int) -> None:
        self.arrivals_total += 1
        w = self._window(t)
        if w is not None:
            w.arrival(tenant, prompt_tokens)
        k = int((t - self.origin) // self.slot_s)
        if k >= self.next_close:  # an arrival reported after its slot closed is not a feature any more
            slot = self.slots.get(k)
            if slot is None:
                slot = self.slots[k] = FeatureSlot(self.origin + k * self.slot_s, self.slot_s)
            slot.arrival(tenant, prompt_tokens)

    def first_token(self, t_arr: float, tenant: str, ttft_ok: bool) -> None:
        w = self._window(t_arr)
        if w is not None:
            w.first_token(tenant, ttft_ok)

    def finished(self, t_arr: float, tenant: str, ttft_ok: bool | None, tbt_ok: bool, output_tokens: int) -> None:
        w = self._window(t_arr)
        if w is not None:
            w.finished(tenant, ttft_ok, tbt_ok)

    # ---- windows --------------------------------------------------------------------------------
    def open(self, start: float, length: float, label: str) -> Window:
        w = Window(start, start + length, label)
        self.windows.append(w)
        return w

    def close(self, w: Window | None) -> None:
        if w is not None and w in self.windows:
            self.windows.remove(w)

    def past_ttft(self, w: Window, now: float) -> dict[str, bool]:
        return {t: now >= w.end + self.ttft.get(t, 0.0) for t in w.tenants}

    def evaluable(self, w: Window, now: float) -> bool:
        if now < w.end + self.settle_s:
            return False
        if now >= w.end + self.max_settle_s:
            return True
        return w.censored(self.past_ttft(w, now)) <= CENSORED_OK * max(w.arrived, 1)

    def score(self, w: Window, now: float, provisional: bool = False) -> Score:
        return w.score(self.weights, self.past_ttft(w, now), provisional)

    # ---- feature slots --------------------------------------------------------------------------
    def closed_slots(self, now: float) -> list[dict[str, float]]:
        """Close every slot that ended by ``now``; the features of each, oldest first."""
        out = []
        while now >= self.origin + (self.next_close + 1) * self.slot_s:
            k = self.next_close
            slot = self.slots.pop(k, None) or FeatureSlot(self.origin + k * self.slot_s, self.slot_s)
            out.append(slot.features(self.names, MIN_SLOT_ARRIVALS))
            out[-1]["_arrivals"] = float(slot.arrivals)
            self.next_close += 1
        return out


def rate_of(slots: list[Mapping[str, float]]) -> float:
    """Arrivals per second over slots (their ``log_rate``), NaN with none."""
    if not slots:
        return math.nan
    return sum(math.exp(float(s["log_rate"])) for s in slots) / len(slots)
