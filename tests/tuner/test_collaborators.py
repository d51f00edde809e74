"""The controller's collaborators on their own: each owns its state and returns what it found (an event, a
measurement, a verdict, a proposal) instead of changing the controller's (issue 26)."""

from __future__ import annotations

import math
import random

import pytest

from superinfer.tuner.arms import Arm, Arms, empty_arms
from superinfer.tuner.baseline import BaselineWatch
from superinfer.tuner.chooser import Chooser, Hold, Jump, Proposal
from superinfer.tuner.config import TunerConfig
from superinfer.tuner.measure import Measurements
from superinfer.tuner.objective import Score
from superinfer.tuner.phase import FeatureSlot
from superinfer.tuner.space import KnobSpace
from superinfer.tuner.tracking import PhaseNamed, TrafficChange, TrafficTracker
from superinfer.tuner.trials import Trials
from tests.tuner.world import START, TENANTS

CHAT = {"log_rate": math.log(20.0), "log_prompt": math.log(1000), "share:chat": 1.0, "share:voice": 0.0}
CFG = TunerConfig(mode="auto", window_s=20.0, warmup_s=2.0, switch_warmup_s=1.0, min_requests=150, settle_s=1.0,
                  max_settle_s=10.0, cooldown_s=5.0, slot_s=5.0, seed=1)


def _features(rng: random.Random, rate: float, length: float = 5.0) -> dict[str, float]:
    s = FeatureSlot(0.0, length)
    t = rng.expovariate(rate)
    while t < length:
        s.arrival("chat", 1000)
        t += rng.expovariate(rate)
    return {**s.features(["chat", "voice"], 8), "_arrivals": float(s.arrivals)}


def _arms(score: float = 0.9, start_score: float | None = None) -> Arms:
    prior = {} if start_score is None else {"start": start_score}
    return Arms(None, {"a": Arm("a", {"step_slo_share": 1.6}, score, CHAT, prior)},
                start=Arm("start", {k: START[k] for k in KnobSpace().knobs}))


def test_the_tracker_names_the_phase_then_reports_a_change() -> None:
    rng, tr = random.Random(0), TrafficTracker(CFG, _arms())
    assert tr.slot(_features(rng, 20.0), arrivals_total=0) is None and not tr.recent  # no traffic yet
    events = [tr.slot(_features(rng, 20.0), arrivals_total=1) for _ in range(CFG.classify_slots)]
    assert events[:-1] == [None] * (CFG.classify_slots - 1)
    named = events[-1]
    assert isinstance(named, PhaseNamed) and named.phase == "a" and named.renamed and named.settle
    assert tr.phase == "a" and not tr.classifying and tr.epoch == 0
    change = next(e for e in (tr.slot(_features(rng, 2.0), 1) for _ in range(6)) if e is not None)
    assert isinstance(change, TrafficChange) and "log_rate" in change.alarms and change.before == "a"
    assert tr.epoch == 1 and tr.phase is None and tr.classifying and tr.phase_slots == []


def test_the_tracker_reports_low_load() -> None:
    rng, tr = random.Random(1), TrafficTracker(CFG, empty_arms())
    assert math.isnan(tr.load().rate) and not tr.load().low
    for _ in range(2):
        tr.slot(_features(rng, 2.0), 1)
    load = tr.load()  # 2 req/s: a window of 94 s holds the 150 requests (superinfer.tuner.sparse)
    assert not load.low and load.window_s == pytest.approx(1.25 * CFG.min_requests / load.rate)
    for _ in range(4):
        tr.slot(_features(rng, 0.01), 1)
    load = tr.load()
    assert load.low and load.rate * CFG.max_window_s < CFG.min_requests and load.window_s == CFG.max_window_s


def _chooser(arms: Arms, **cfg) -> Chooser:
    c = TunerConfig(**{**CFG.__dict__, **cfg})
    return Chooser(c, KnobSpace(c.knobs, c.step_caps), arms, None, "test")


def test_the_chooser_returns_a_jump_a_trial_or_nothing() -> None:
    inc = KnobSpace().clip(START)
    big = _chooser(_arms(score=0.95, start_score=0.70)).to_phase("a", inc)
    assert isinstance(big, Jump) and big.score - big.replaced == pytest.approx(0.25)
    small = _chooser(_arms(score=0.95, start_score=0.90)).to_phase("a", inc)
    assert isinstance(small, Proposal) and small.arm == "arm:a" and "below jump_gain" in small.why
    assert _chooser(_arms()).to_phase("a", {**inc, "step_slo_share": 1.6}) is None  # already there
    held = _chooser(empty_arms(), explore_budget=0.0).choose(0.0, inc, None)
    assert isinstance(held, Hold) and "no study arm" in held.reason


def test_a_jump_is_checked_once_against_the_study() -> None:
    ch = _chooser(_arms(score=0.95, start_score=0.70))
    inc = KnobSpace().clip(START)
    jump = ch.to_phase("a", inc)
    ch.jumped_from(inc, jump, epoch=0)
    low = Score.of({"chat": (60, 100)}, {"chat": 1.0})
    revert = ch.check_jump(low, epoch=0)
    assert isinstance(revert, Proposal) and revert.arm == "revert:a" and revert.target == inc
    assert ch.jumped is None
    ch.jumped_from(inc, jump, epoch=0)
    assert ch.check_jump(low, epoch=1) is None and ch.jumped is None  # another epoch: stale


def test_trials_return_the_settings_of_their_slots_and_end_cleanly() -> None:
    m = Measurements(TENANTS, CFG.slot_s, CFG.settle_s, CFG.max_settle_s, 0.0)
    trials = Trials(CFG, m)
    inc, cand = {"step_slo_share": 1.0}, {"step_slo_share": 1.6}
    tr = trials.start(0.0, "local", cand, None, inc, None, 0.9)
    assert trials.running is tr and trials.switch(0.0, inc) == [cand]  # slot 0 runs the candidate
    assert trials.switch(0.5, inc) == []  # nothing due
    assert trials.switch(2.5 * CFG.switch_s, inc) == [inc] and tr.sb.k == 1  # slot 1 runs the incumbent
    assert trials.judge(2.5 * CFG.switch_s) is None  # slots left: no verdict
    ended, served = trials.end(3 * CFG.switch_s, provisional=True)
    assert ended is tr and trials.running is None and m.windows == [] and served.decided == 0


def test_the_watch_keeps_a_full_window_as_the_baseline_once() -> None:
    m = Measurements(TENANTS, CFG.slot_s, CFG.settle_s, CFG.max_settle_s, 0.0)
    w = BaselineWatch(CFG, m, 0.0)
    w.arrival(0.0)
    assert w.started and w.obs is not None and w.obs.label == "baseline"
    for i in range(200):
        t = i * 0.05
        m.arrival(t, "chat", 1000)
        m.first_token(t, "chat", True)
        m.finished(t, "chat", True, True, 10)
    end = w.obs.end
    assert w.measure(end + CFG.settle_s, epoch=0, classifying=True) is None  # not while classifying
    got = w.measure(end + CFG.settle_s, epoch=0, classifying=False)
    assert got is not None and got.kept and got.score.decided == 200 and w.obs is None
    assert w.take(epoch=1) is None  # measured in another epoch
    assert w.take(epoch=0) is got.score and w.take(epoch=0) is None  # proposed against once
