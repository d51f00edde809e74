"""The plugin's online step-time fit (:mod:`superinfer.vllm.stepfit`): it learns an engine's step time from
the steps it measures, ignores a few wild ones, and offers no model before it has seen prefills and decodes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.sim.calibration import Coefficients, Sample
from superinfer.vllm.stepfit import MIN_STEPS, REFIT_EVERY, OnlineStepFit, step_sample

TRUE = Coefficients(overhead_s=0.002, per_prefill_token_s=1e-5, per_prefill_attn_pair_s=2e-9,
                    per_decode_seq_s=5e-5, per_kv_token_s=1e-7)


def _steps(n: int, seed: int = 0, noise: float = 0.03, prefill_share: float = 0.3) -> list[Sample]:
    """``n`` steps of a mixed batch: decodes with their context, and now and then a prefill chunk."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d = int(rng.integers(1, 40))
        kv = int(d * rng.integers(50, 800))
        p = int(rng.integers(16, 1024)) if rng.random() < prefill_share else 0
        pairs = p * (p + 1) / 2
        t = TRUE.predict(p, d, kv, pairs) * (1 + noise * rng.standard_normal())
        out.append(Sample(p, d, kv, max(t, 1e-6), pairs))
    return out


def _feed(fit: OnlineStepFit, samples: list[Sample]) -> None:
    """Feed measured steps through ``begin``/``end`` with a fake clock, as the scheduler does."""
    now = fit._last_end_ns or 0
    for s in samples:
        fit._push(None, now, s._replace(measured_s=1.0))  # the counts, as begin() reads them from vLLM
        now += int(round(s.measured_s * 1e9))
        fit.end(now_ns=now)


def test_no_model_until_the_window_has_seen_prefills_and_decodes() -> None:
    fit = OnlineStepFit(refit_min_s=0)
    _feed(fit, _steps(MIN_STEPS * 2, prefill_share=0.0))  # decodes only: no prefill price to learn
    assert fit.model() is None
    _feed(fit, _steps(MIN_STEPS, seed=1, prefill_share=0.5))
    assert fit.model() is not None


def test_it_learns_the_step_time_of_mixed_batches() -> None:
    fit = OnlineStepFit(refit_min_s=0)
    _feed(fit, _steps(512))
    model = fit.model()
    assert model is not None
    for p, d, kv in ((0, 8, 4000), (256, 8, 4000), (1024, 32, 16000), (64, 1, 100)):
        want = TRUE.iteration_s(p, p * (p + 1) / 2, d, kv)
        assert abs(model(p, p * (p + 1) / 2, d, kv, 0) - want) / want < 0.08, (p, d, kv)
    assert fit.stats()["mape"] < 0.1


def test_a_few_wild_steps_do_not_move_it() -> None:
    clean, dirty = OnlineStepFit(refit_min_s=0), OnlineStepFit(refit_min_s=0)
    steps = _steps(512, seed=3)
    _feed(clean, steps)
    wild = [s._replace(measured_s=s.measured_s * 50) if i % 40 == 0 else s for i, s in enumerate(steps)]  # GC pauses
    _feed(dirty, wild)
    for p, d, kv in ((0, 16, 8000), (512, 16, 8000)):
        a, b = clean.model()(p, p * (p + 1) / 2, d, kv, 0), dirty.model()(p, p * (p + 1) / 2, d, kv, 0)
        assert abs(a - b) / a < 0.1


def test_it_follows_the_host_when_the_engine_slows_down() -> None:
    fit = OnlineStepFit(refit_min_s=0)
    _feed(fit, _steps(512, seed=4))
    before = fit.model()(0, 0, 16, 8000, 0)
    _feed(fit, [s._replace(measured_s=2 * s.measured_s) for s in _steps(512, seed=5)])  # the host got busy
    assert 1.8 < fit.model()(0, 0, 16, 8000, 0) / before < 2.2


def test_bad_measurements_are_skipped_not_raised() -> None:
    fit = OnlineStepFit(refit_min_s=0)
    fit._push(None, 10, Sample(0, 4, 100, 1.0, 0.0))
    fit.end(now_ns=5)  # a clock that went backwards
    fit.begin(0, {}, {})  # an empty step
    fit.end(now_ns=100)
    assert len(fit.samples) == 0 and fit.skipped == 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.5))
def test_the_model_is_never_negative_and_grows_with_prefill(seed: int, noise: float) -> None:
    fit = OnlineStepFit(refit_min_s=0)
    _feed(fit, _steps(256, seed=seed, noise=noise))
    model = fit.model()
    assert model is not None
    prev = 0.0
    for p in (0, 1, 16, 128, 1024):
        t = model(p, p * (p + 1) / 2, 4, 1000, 0)
        assert t >= prev >= 0.0
        prev = t


def test_step_counts_follow_the_twins_convention() -> None:
    def req(computed: int, outputs: int) -> SimpleNamespace:
        return SimpleNamespace(num_computed_tokens=computed, num_output_tokens=outputs)

    # vLLM has advanced num_computed_tokens by the step's tokens already
    requests = {"dec": req(101, 5), "chunk": req(300, 0), "first": req(64, 0), "gone": req(1, 1)}
    s = step_sample({"dec": 1, "chunk": 100, "first": 64, "missing": 3}, requests, 0.01)
    assert (s.decode_seqs, s.prefill_tokens, s.kv_tokens) == (1, 164, 100 + 200)
    assert s.prefill_attn_pairs == 100 * 200 + 100 * 101 / 2 + 64 * 65 / 2


def test_once_a_model_exists_refits_are_rate_limited() -> None:
    """A refit costs milliseconds: the first fit comes as soon as the window is ready, later ones at most once
    in ``refit_min_s`` of wall time, however many steps pass."""
    fit = OnlineStepFit(refit_min_s=3600.0)
    _feed(fit, _steps(512, seed=6))
    assert fit.model() is not None and fit.refits == 1
    unlimited = OnlineStepFit(refit_min_s=0)
    _feed(unlimited, _steps(512, seed=6))
    assert unlimited.refits == 512 // REFIT_EVERY


def test_with_two_steps_in_flight_a_step_lasts_from_the_previous_output() -> None:
    """vLLM's async scheduling: step n+1 is scheduled before step n's output is processed. Each output pairs
    with its own step (by the scheduler output object), and a step's time runs from the later of its schedule
    and the previous output: the gap between two outputs, what a client sees."""
    fit = OnlineStepFit(refit_min_s=0)
    a, b, c = object(), object(), object()
    s = Sample(0, 4, 100, 1.0, 0.0)
    fit._push(a, 0, s)
    fit._push(b, 100, s._replace(decode_seqs=5))  # scheduled while a runs
    fit.end(now_ns=1_000, key=a)
    fit._push(c, 1_100, s._replace(decode_seqs=6))
    fit.end(now_ns=2_000, key=b)
    fit.end(now_ns=2_500, key=c)
    assert [(x.decode_seqs, round(x.measured_s * 1e9)) for x in fit.samples] == [(4, 1_000), (5, 1_000), (6, 500)]
    # synchronous scheduling: each step scheduled after the previous output, timed from its schedule
    fit._push(a, 3_000, s)
    fit.end(now_ns=3_400, key=a)
    assert round(fit.samples[-1].measured_s * 1e9) == 400
    # an output whose step is not the oldest in flight: the older one never came back, it is dropped
    fit._push(a, 4_000, s)
    fit._push(b, 4_100, s)
    fit.end(now_ns=5_000, key=b)
    assert fit.skipped == 1 and round(fit.samples[-1].measured_s * 1e9) == 900 and not fit._open
