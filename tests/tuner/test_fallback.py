"""When the traffic changes, the tuner leaves the setting it chose for the old phase at once and runs the
study's robust setting until the new phase is named (``TunerConfig.change_fallback``): a phase's arm is
not known to be good in the next phase (on ``regimes`` the reasoning arm carried into the voice rush lost
13-25 pp there)."""

from __future__ import annotations

import math

import pytest

from tests.tuner.world import World, arms_for, make, share_world

CHAT_FEATURES = {"log_rate": math.log(20.0), "log_prompt": math.log(1000), "share:chat": 1.0, "share:voice": 0.0}
ROBUST = {"step_slo_share": 1.2}


def settled_on_the_arm(**cfg):
    """A world whose phase ``a`` wants step_slo_share 1.6; the tuner has adopted phase a's arm (no local
    steps: nothing runs when the traffic changes)."""
    cfg.setdefault("explore_budget", 0.0)
    world = World(share_world(best=1.6))
    ctl = make(world, arms_for(CHAT_FEATURES, robust=cfg.pop("robust", ROBUST), step_slo_share=1.6), **cfg)
    world.run(ctl, 0.0, 150.0)
    assert ctl.incumbent["step_slo_share"] == pytest.approx(1.6) and ctl.trial is None
    return world, ctl


def change(world: World, ctl) -> tuple:
    world.voice_share = 0.5
    world.run(ctl, 150.0, 230.0)
    alarm = next(d for d in ctl.decisions if d.action == "phase" and "traffic changed" in d.reason)
    return alarm, [d for d in ctl.decisions if d.t >= alarm.t]


def test_a_traffic_change_falls_back_to_the_robust_setting_at_once() -> None:
    world, ctl = settled_on_the_arm()
    alarm, after = change(world, ctl)
    fallback = next(d for d in after if d.action == "fallback")
    assert fallback.t == alarm.t and fallback.params["step_slo_share"] == pytest.approx(1.2)
    assert [v["step_slo_share"] for t, v, _, arm in world.writes if t == alarm.t and arm is None] == [pytest.approx(1.2)]
    assert "robust setting until the new phase is named" in fallback.reason


def test_no_fallback_when_switched_off_or_without_a_robust_setting() -> None:
    for cfg in ({"change_fallback": False}, {"robust": None}):
        world, ctl = settled_on_the_arm(**cfg)
        alarm, after = change(world, ctl)
        assert not any(d.action == "fallback" for d in after)
        assert not any(t == alarm.t and v.get("step_slo_share") == pytest.approx(1.2) for t, v, _, _ in world.writes)


def test_shadow_says_it_would_fall_back_and_writes_nothing() -> None:
    world, ctl = settled_on_the_arm()
    ctl.set_mode("shadow", 150.0)
    n = len(world.writes)
    alarm, after = change(world, ctl)
    assert any(d.action == "propose" and "fall back to arm:robust" in d.reason for d in after)
    assert len(world.writes) == n and ctl.incumbent["step_slo_share"] == pytest.approx(1.6)
