"""The plugin's step-time model fitted online from its own steps, for RotaSched v2's SLO token budget.

Without a calibration file (``superinferd calibrate``) the plugin still needs to predict how long a step of
``p`` prefill tokens beside ``d`` decodes takes, or it cannot size iterations to the TBT SLO. It measures every
step it schedules — from ``schedule()`` to the end of ``update_from_output()``, which is the scheduler, the
forward pass and the output update: the gap a client sees between tokens, less the serving loop's queue hop —
and fits the calibration's linear form (:func:`superinfer.sim.calibration.fit`, non-negative least squares on
errors relative to each step's time) to the last :data:`WINDOW` of them, every :data:`REFIT_EVERY` steps but at
most once in :data:`REFIT_MIN_S` seconds once a model exists. A fitted model is trusted only once the
window holds :data:`MIN_STEPS` steps, :data:`MIN_KIND` of them with prefill tokens and as many with decodes,
so its prefill price comes from prefills it has seen; until then :meth:`OnlineStepFit.model` is None and the
plugin keeps vLLM's budget, as it did without a fit. Steps further than :data:`TRIM_MADS` robust deviations
from a fit (a garbage collection, a host hiccup), relative to their time, are dropped before the next one
(:data:`TRIM_ROUNDS` rounds).

Because the window slides, the model follows the host: on these shared machines a step's time moves ±30 %
within minutes, and a file measured on another day is off by 2-3×. A calibration file, when given, still
wins (``bench fidelity`` compares the plugin against a twin priced with that same file).

Under vLLM's asynchronous scheduling step n+1 is scheduled before step n's output is processed, so a step's
time starts at the later of its ``schedule()`` and the previous step's output (with synchronous scheduling
that is always its ``schedule()``): with two steps in flight that is the gap between two outputs, again what a
client sees. Steps are paired with their outputs by the scheduler output object, in order.

Invariants: the model is a non-negative combination of the step's counts (never negative, non-decreasing in
prefill tokens); observing a step never raises (a bad measurement is skipped and counted).
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from superinfer.core.budget import IterationModel
from superinfer.sim.calibration import Coefficients, Sample, fit

#: steps the fit looks at (the last ones)
WINDOW = 512
#: refit after this many new steps
REFIT_EVERY = 64
#: once a model exists, refit at most once in this many seconds of wall time: a refit costs ~5 ms on these
#: hosts, which every 64 steps of a ~1.5 ms tiny-model step was 5 % of the engine's time
#: (docs/measurements.md, 2026-12-06); the first fit still comes as soon as the window is ready
REFIT_MIN_S = 1.0
#: steps in the window before a model is trusted
MIN_STEPS = 64
#: steps with prefill tokens, and steps with decodes, in the window before a model is trusted
MIN_KIND = 8
#: a step further than this many scaled median absolute deviations from a fit is left out of the next
TRIM_MADS = 4.0
#: fits after the first, each without the steps far from the one before
TRIM_ROUNDS = 2


def step_sample(scheduled: Mapping[str, int], requests: Mapping[str, Any], measured_s: float) -> Sample:
    """The counts of one step as :class:`~superinfer.sim.calibration.Sample` (the twin's convention): a
    request that computes one token after its first output token is a decode that reads its context; any
    other computes prefill tokens, paying attention pairs against its earlier context and reading it.
    ``scheduled``: the step's tokens per request id; ``requests``: vLLM's requests, whose
    ``num_computed_tokens`` already counts the step (as after ``_update_after_schedule``)."""
    prefill = decodes = kv = 0
    pairs = 0.0
    for rid, n in scheduled.items():
        req = requests.get(rid)
        if req is None or n <= 0:
            continue
        before = max(int(req.num_computed_tokens) - int(n), 0)
        if n == 1 and int(req.num_output_tokens) > 0:
            decodes += 1
            kv += before
        else:
            prefill += int(n)
            pairs += n * before + n * (n + 1) / 2
            kv += before
    return Sample(prefill, decodes, kv, measured_s, pairs)


class OnlineStepFit:
    """A sliding-window NNLS fit of the step time (see the module docstring). ``begin`` when a step is
    scheduled, ``end`` when its output is processed; ``model()`` is the current fit's step-time model."""

    def __init__(self, window: int = WINDOW, refit_every: int = REFIT_EVERY, min_steps: int = MIN_STEPS,
                 min_kind: int = MIN_KIND, refit_min_s: float = REFIT_MIN_S) -> None:
        if not (0 < min_steps <= window) or refit_every <= 0 or min_kind < 0:
            raise ValueError(f"OnlineStepFit: need 0 < min_steps <= window and refit_every > 0 "
                             f"(got window={window}, refit_every={refit_every}, min_steps={min_steps})")
        self.samples: collections.deque[Sample] = collections.deque(maxlen=window)
        self.refit_every, self.min_steps, self.min_kind = refit_every, min_steps, min_kind
        self.coefficients: Coefficients | None = None
        self.mape: float | None = None  # mean absolute error of the fit over the steps it kept, as a share
        self.refits = self.skipped = 0
        self._since = 0
        self.refit_min_s = refit_min_s
        self._fitted_at = -math.inf  # time.monotonic() of the last refit
        self._open: collections.deque[tuple[object, int, Sample | None]] = collections.deque()  # steps in flight
        self._last_end_ns: int | None = None  # when the last step's output was processed

    def begin(self, t0_ns: int, scheduled: Mapping[str, int], requests: Mapping[str, Any], *,
              key: object = None) -> None:
        """A step was scheduled at ``t0_ns`` (``time.perf_counter_ns``). Its counts are read now (its output
        may free its requests); its time at :meth:`end` with the same ``key`` (the scheduler output)."""
        self._push(key, t0_ns, step_sample(scheduled, requests, 1.0) if scheduled else None)

    def _push(self, key: object, t0_ns: int, sample: Sample | None) -> None:
        if len(self._open) >= 8:  # outputs never processed (an engine error): forget the oldest
            self._open.popleft()
            self.skipped += 1
        self._open.append((key, t0_ns, sample))

    def end(self, now_ns: int | None = None, *, key: object = None) -> None:
        """The output of the step scheduled with ``key`` (None: the oldest in flight) was processed: record its
        time from the later of its schedule and the previous output (module docstring); refit when due."""
        while self._open:
            k, t0, sample = self._open.popleft()
            if key is None or k is key:
                break
            self.skipped += 1  # a step whose output never came back
        else:
            return
        now = time.perf_counter_ns() if now_ns is None else now_ns
        start = t0 if self._last_end_ns is None else max(t0, self._last_end_ns)
        self._last_end_ns = now
        if sample is None:
            return
        dt = (now - start) * 1e-9
        if not (math.isfinite(dt) and dt > 0) or sample.prefill_tokens + sample.decode_seqs == 0:
            self.skipped += 1
            return
        self.samples.append(sample._replace(measured_s=dt))
        self._since += 1
        if self._since >= self.refit_every and self._ready():
            now = time.monotonic()
            if self.coefficients is None or now - self._fitted_at >= self.refit_min_s:
                self._fitted_at = now
                self.refit()

    def _ready(self) -> bool:
        s = self.samples
        return (len(s) >= self.min_steps and sum(1 for x in s if x.prefill_tokens > 0) >= self.min_kind
                and sum(1 for x in s if x.decode_seqs > 0) >= self.min_kind)

    def refit(self) -> None:
        """Fit the window now: a relative-error NNLS fit, then up to :data:`TRIM_ROUNDS` more, each without
        the steps far from the one before (never dropping half of the window)."""
        self._since = 0
        rows = keep = list(self.samples)
        try:
            coef = fit(rows, relative=True)
            for _ in range(TRIM_ROUNDS):
                err = _predict(coef, rows) / np.array([r.measured_s for r in rows]) - 1.0
                mid = float(np.median(err))
                mad = 1.4826 * float(np.median(np.abs(err - mid)))
                trimmed = [r for r, e in zip(rows, err) if mad == 0 or abs(e - mid) <= TRIM_MADS * mad]
                if len(trimmed) < len(rows) // 2 or len(trimmed) == len(keep):
                    break
                keep, coef = trimmed, fit(trimmed, relative=True)
        except ValueError:
            self.skipped += 1
            return
        kept = np.array([r.measured_s for r in keep])
        self.mape = float(np.mean(np.abs(_predict(coef, keep) - kept) / kept))
        self.coefficients = coef
        self.refits += 1

    def model(self) -> IterationModel | None:
        """The fit as a step-time model, or None before the window is ready."""
        return self.coefficients.iteration_s if self.coefficients is not None else None

    def stats(self) -> dict[str, Any]:
        """What the fit knows, for the plugin's published counters."""
        out: dict[str, Any] = {"steps": len(self.samples), "refits": self.refits, "skipped": self.skipped,
                               "mape": self.mape}
        if self.coefficients is not None:
            out["coefficients"] = dict(vars(self.coefficients))
        return out


def _predict(coef: Coefficients, rows: list[Sample]) -> np.ndarray:
    return np.array([coef.predict(r.prefill_tokens, r.decode_seqs, r.kv_tokens, r.prefill_attn_pairs) for r in rows])
