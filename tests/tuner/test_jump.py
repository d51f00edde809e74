"""Going to a phase's arm at once (a *jump*, ``TunerConfig.jump_gain``) when the offline study measured a
large gain over the incumbent's setting in that phase; a trial otherwise; and a jump that the live
traffic contradicts is tried back (``revert:<phase>``)."""

from __future__ import annotations

import math

import pytest

from superinfer.tuner.arms import Arm, Arms
from superinfer.tuner.space import KnobSpace
from tests.tuner.world import START, World, make, share_world

CHAT_FEATURES = {"log_rate": math.log(20.0), "log_prompt": math.log(1000), "share:chat": 1.0, "share:voice": 0.0}


def arms_with_prior(share: float, score: float, start_score: float) -> Arms:
    """One phase ``a`` whose arm sets ``step_slo_share`` to ``share``; the study scored it ``score`` and the
    start (the world's start setting) ``start_score`` in that phase."""
    return Arms(None, {"a": Arm("a", {"step_slo_share": share}, score, CHAT_FEATURES, {"start": start_score})},
                start=Arm("start", {k: START[k] for k in KnobSpace().knobs}))  # the study's start: every tuned knob


def actions(ctl) -> list[str]:
    return [d.action for d in ctl.decisions]


def test_a_large_study_gain_over_the_incumbent_is_adopted_at_once() -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_with_prior(1.6, score=0.95, start_score=0.70))
    world.run(ctl, 0.0, 120.0)
    jump = next(d for d in ctl.decisions if d.action == "jump")
    assert "gain +0.2500 >= jump_gain 0.1" in jump.reason
    # written at the jump, no switchback of the arm against the start
    assert [v["step_slo_share"] for t, v, _, _ in world.writes if t == jump.t] == [pytest.approx(1.6)]
    assert not any(d.action == "trial" and d.reason.startswith("arm:a") for d in ctl.decisions)
    assert ctl.counts["jumps"] == 1 and ctl.jumped is None  # its first window was checked: as expected
    assert not any(d.action == "trial" and d.reason.startswith("revert:") for d in ctl.decisions)
    assert ctl.incumbent["step_slo_share"] == pytest.approx(1.6)


def test_a_small_study_gain_is_tried_not_jumped() -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_with_prior(1.6, score=0.95, start_score=0.90))
    world.run(ctl, 0.0, 120.0)
    assert "jump" not in actions(ctl)
    trial = next(d for d in ctl.decisions if d.action == "trial")
    assert trial.reason.startswith("arm:a") and "the study's gain +0.050" in trial.reason
    assert "accept" in actions(ctl) and ctl.incumbent["step_slo_share"] == pytest.approx(1.6)


def test_jump_gain_one_never_jumps() -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_with_prior(1.6, score=0.95, start_score=0.10), jump_gain=1.0)
    world.run(ctl, 0.0, 60.0)
    assert "jump" not in actions(ctl) and "trial" in actions(ctl)


def test_a_jump_the_live_traffic_contradicts_is_tried_back_and_reverted() -> None:
    # the world's best is the start (0.8: 0.95); the "study" claims the arm (1.6: 0.71 live) gains 0.15
    world = World(share_world(best=START["step_slo_share"]))
    ctl = make(world, arms_with_prior(1.6, score=0.90, start_score=0.75))
    world.run(ctl, 0.0, 200.0)
    acts = actions(ctl)
    assert "jump" in acts
    revert = next(d for d in ctl.decisions if d.action == "trial" and d.reason.startswith("revert:a"))
    assert "below the study's 0.7500 for the setting it replaced" in revert.reason
    verdict = next(d for d in ctl.decisions if d.t >= revert.t and d.action in ("accept", "reject", "rollback"))
    assert verdict.action == "accept", verdict.reason
    assert ctl.incumbent["step_slo_share"] == pytest.approx(START["step_slo_share"])
    # the revert came after the arm's first window (not before it could be measured)
    jump = next(d for d in ctl.decisions if d.action == "jump")
    assert revert.t - jump.t >= ctl.cfg.window_s


def test_a_setting_the_study_did_not_score_is_tried() -> None:
    world = World(share_world(best=1.6))
    world.params["alpha"] = 5.0  # the incumbent is neither the start nor an arm: no prior for it
    ctl = make(world, arms_with_prior(1.6, score=0.95, start_score=0.10))
    world.run(ctl, 0.0, 60.0)
    assert "jump" not in actions(ctl) and "trial" in actions(ctl)


@pytest.mark.parametrize("mode", ["shadow", "advise"])
def test_shadow_and_advise_say_they_would_jump_and_write_nothing(mode: str) -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_with_prior(1.6, score=0.95, start_score=0.70), mode=mode)
    world.run(ctl, 0.0, 60.0)
    assert world.writes == [] and "jump" not in actions(ctl) and ctl.counts["jumps"] == 0
    said = next(d for d in ctl.decisions if d.action in ("propose", "advise"))
    assert said.reason.startswith(f"{mode}: would jump to arm:a without a trial") and "nothing written" in said.reason
    assert (ctl.candidate is not None) == (mode == "advise")
