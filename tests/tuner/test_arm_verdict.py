"""The verdict on an offline study's arm (``TunerConfig.arm_test``), as specifications on the synthetic
world (tests/tuner/world.py): the study is prior evidence for its arm, so by default the trial only has
to not contradict it (``unless_worse``); a local step still has to prove it is better."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from superinfer.tuner import TunerConfig
from superinfer.tuner.config import TunerConfigError
from tests.tuner.world import START, World, arms_for, make

RATE = 80.0  # 1600 counted requests a side per trial (window 20 s): a 4 pp loss is many standard errors
FEATURES = {"log_rate": math.log(RATE), "log_prompt": math.log(1000), "share:chat": 1.0, "share:voice": 0.0}
ARM_SHARE = 1.6  # the study's arm moves step_slo_share from the start's 0.8


def arm_world(loss: float) -> Callable[[dict, str], float]:
    """0.9 at the start's setting; ``loss`` less wherever step_slo_share is the arm's."""
    def p(params: dict, phase: str) -> float:
        return 0.9 - (loss if abs(params["step_slo_share"] - ARM_SHARE) < 1e-9 else 0.0)
    return p


def first_verdict(loss: float, seed: int, **cfg: object) -> str:
    """What the jump to the study's arm ends in (accept / reject / rollback) in a world where the arm
    loses ``loss`` against the start (local steps off: no other candidate)."""
    world = World(arm_world(loss), rate=RATE, seed=seed)
    ctl = make(world, arms_for(FEATURES, step_slo_share=ARM_SHARE), seed=seed, explore_threshold=0.99, **cfg)
    world.run(ctl, 0.0, 120.0)
    ends = [d for d in ctl.decisions if d.action in ("accept", "reject", "rollback") and "arm:a" in d.reason]
    assert ends, [(d.action, d.reason) for d in ctl.decisions]
    return ends[0].action


@pytest.mark.parametrize("unit", ["slot", "request"])
def test_an_arm_as_good_as_the_incumbent_is_adopted(unit: str) -> None:
    verdicts = [first_verdict(0.0, seed, test_unit=unit) for seed in range(10)]
    assert verdicts.count("accept") >= 8, verdicts  # one-sided alpha 0.05: about 1 in 20 rejected


@pytest.mark.parametrize("unit", ["slot", "request"])
def test_an_arm_clearly_worse_than_the_incumbent_is_not_adopted(unit: str) -> None:
    # 4 pp: below the guard's 5 pp margin (no rollback), yet consistently worse in every slot
    verdicts = [first_verdict(0.04, seed, test_unit=unit) for seed in range(10)]
    assert verdicts.count("accept") <= 1, verdicts
    assert all(v in ("reject", "rollback") for v in verdicts if v != "accept")


def test_the_guard_still_rolls_back_an_arm_that_collapses_a_tenant() -> None:
    verdicts = [first_verdict(0.5, seed) for seed in range(3)]
    assert verdicts == ["rollback"] * 3, verdicts


def test_noninferiority_asks_the_trial_to_prove_the_arm_is_not_worse() -> None:
    """The earlier rule, kept as ``arm_test = "noninferiority"``: an equal arm passes only when the trial
    can bound its loss within the margin, so a tighter margin adopts it less often than the default."""
    strict = [first_verdict(0.0, seed, arm_test="noninferiority", noninferiority_margin=0.005) for seed in range(10)]
    default = [first_verdict(0.0, seed) for seed in range(10)]
    assert strict.count("accept") < default.count("accept"), (strict, default)
    assert [first_verdict(0.04, seed, arm_test="noninferiority") for seed in range(5)].count("accept") == 0


def test_arm_test_is_validated_with_a_message() -> None:
    assert TunerConfig().arm_test == "unless_worse"
    with pytest.raises(TunerConfigError, match="arm_test: expected one of unless_worse, noninferiority"):
        TunerConfig(arm_test="lenient")
    assert START["step_slo_share"] != ARM_SHARE


def robust_trials(features: dict) -> tuple[int, int]:
    """(trials of the robust arm, trials of the phase's arm) in 10 minutes of a world where nothing
    matters, with an arms file whose phase (``features``) may or may not match the traffic."""
    world = World(lambda p, ph: 0.9, rate=RATE)
    arms = arms_for(features, robust={"step_slo_share": 1.2}, step_slo_share=ARM_SHARE)
    ctl = make(world, arms, explore_threshold=0.0)
    world.run(ctl, 0.0, 600.0)
    trials = [d.reason for d in ctl.decisions if d.action == "trial"]
    return sum(r.startswith("arm:robust") for r in trials), sum(r.startswith("arm:a") for r in trials)


def test_the_robust_arm_is_offered_only_where_no_phase_is_named() -> None:
    """In a named phase the study's arm for it is at least as good there as the robust one (the robust
    trial competed for it): the robust arm is not re-tested. In traffic the arms file does not name, it
    is the study's candidate."""
    robust, phase = robust_trials(FEATURES)
    assert robust == 0 and phase >= 1, (robust, phase)
    far = {**FEATURES, "log_prompt": math.log(20000)}  # prompts 20x longer than the traffic's: unknown
    robust, phase = robust_trials(far)
    assert robust >= 1 and phase == 0, (robust, phase)
