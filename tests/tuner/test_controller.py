"""The controller's state machine on a synthetic world (tests/tuner/world.py): it decides, it keeps
what is better, it rolls back what is worse within one window, and it freezes when it must."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from superinfer.core import INTEGER_PARAMS, PARAM_BOUNDS
from superinfer.tuner import Controller, TunerConfig
from superinfer.tuner.snapshot import dump, restore, status
from tests.tuner.world import START, TENANTS, World, arms_for, make, share_world

CHAT_FEATURES = {"log_rate": math.log(20.0), "log_prompt": math.log(1000), "share:chat": 1.0, "share:voice": 0.0}


def actions(ctl: Controller) -> list[str]:
    return [d.action for d in ctl.decisions]


def test_jumps_to_the_phase_arm_and_keeps_it_when_it_is_better() -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_for(CHAT_FEATURES, step_slo_share=1.6))
    world.run(ctl, 0.0, 120.0)
    assert ctl.phase == "a"
    assert "trial" in actions(ctl) and "accept" in actions(ctl), actions(ctl)
    assert ctl.incumbent["step_slo_share"] == pytest.approx(1.6)
    accepted = next(d for d in ctl.decisions if d.action == "accept")
    assert "adopted unless worse" in accepted.reason and "switchback" in accepted.reason
    # written through the writer: the accepted setting is in force from the verdict on
    assert [v["step_slo_share"] for t, v, _, _ in world.writes if t == accepted.t][-1] == pytest.approx(1.6)


def test_a_bad_arm_is_rolled_back_within_one_window() -> None:
    world = World(share_world(best=0.8))
    ctl = make(world, arms_for(CHAT_FEATURES, hopeless_last=0))  # the "study" says: turn hopeless-last off
    world.run(ctl, 0.0, 60.0)
    trial = next(d for d in ctl.decisions if d.action == "trial")
    rollback = next(d for d in ctl.decisions if d.action == "rollback")
    # within the first block C I I C (slot-level tests need two slots a side): 4 slots, about one window
    assert rollback.t - trial.t <= 4 * ctl.cfg.switch_s
    assert "guard: tenant chat" in rollback.reason
    assert ctl.incumbent["hopeless_last"] == 1 and world.params["hopeless_last"] == 1
    assert ctl.freeze.rollbacks_last_hour(60.0) == 1


def test_local_steps_climb_toward_a_better_setting() -> None:
    # 80 req/s: the slot-level test (4 slots a side, Student's t) needs about twice the requests the
    # request-level z-test needed for the same small steps
    world = World(share_world(best=2.0), rate=80.0)
    ctl = make(world, explore_threshold=0.05)
    world.run(ctl, 0.0, 1200.0)
    assert ctl.counts["trials"].get("accept", 0) >= 1, list(ctl.decisions)[-10:]
    assert ctl.incumbent["step_slo_share"] > START["step_slo_share"] + 0.1  # uphill, never downhill


def test_operator_write_freezes_auto_until_unfrozen() -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_for(CHAT_FEATURES, step_slo_share=1.6))
    world.run(ctl, 0.0, 10.0)
    ctl.external_write({**world.params, "alpha": 5.0}, "api:127.0.0.1", 10.0)
    assert ctl.freeze.reason(10.0) == "operator" and ctl.incumbent["alpha"] == 5.0
    n_writes = len(world.writes)
    world.params["alpha"] = 5.0
    world.run(ctl, 10.0, 150.0)
    assert len(world.writes) == n_writes and ctl.state == "frozen"  # nothing written while frozen
    ctl.set_freeze(False, 150.0)
    world.run(ctl, 150.0, 300.0)
    assert ctl.freeze.reason(300.0) is None and len(world.writes) > n_writes


def test_low_load_freezes_and_thaws() -> None:
    # 0.03 req/s: even the longest window (max_window_s, 900 s) holds fewer than 150 requests (sparse.py)
    world = World(share_world(best=1.6), rate=0.03)
    ctl = make(world)
    world.run(ctl, 0.0, 300.0)
    assert ctl.freeze.reason(300.0) == "low_load" and ctl.state == "frozen" and not world.writes
    world.rate = 20.0
    world.run(ctl, 300.0, 360.0)
    assert ctl.freeze.reason(360.0) is None


def test_too_many_rollbacks_freeze_it() -> None:
    world = World(share_world(best=0.8))
    ctl = make(world, arms_for(CHAT_FEATURES, robust={"hopeless_last": 0}, hopeless_last=0), max_rollbacks_per_hour=2,
               explore_threshold=0.0)
    world.run(ctl, 0.0, 600.0)
    assert ctl.freeze.reason(600.0) == "rollbacks"
    assert ctl.freeze.rollbacks_last_hour(600.0) == 2 and world.params["hopeless_last"] == 1


@pytest.mark.parametrize("mode", ["shadow", "advise"])
def test_shadow_and_advise_never_write(mode: str) -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_for(CHAT_FEATURES, step_slo_share=1.6), mode=mode)
    world.run(ctl, 0.0, 200.0)
    assert world.writes == []
    acts = actions(ctl)
    assert ("advise" if mode == "advise" else "propose") in acts and "trial" not in acts
    if mode == "advise":
        assert status(ctl, 200.0)["candidate"] is not None


def test_a_traffic_change_aborts_the_trial_and_resets() -> None:
    world = World(share_world(best=1.6))
    ctl = make(world, arms_for(CHAT_FEATURES, step_slo_share=1.6))
    world.run(ctl, 0.0, 40.0)
    world.voice_share = 0.5
    world.run(ctl, 40.0, 100.0)
    assert any(d.action == "phase" and "traffic changed" in d.reason for d in ctl.decisions)
    assert ctl.epoch >= 1


def test_state_survives_a_restart() -> None:
    world = World(share_world(best=0.8))
    ctl = make(world, arms_for(CHAT_FEATURES, hopeless_last=0))
    world.run(ctl, 0.0, 60.0)
    ctl.set_mode("advise", 60.0)
    ctl.set_freeze(True, 60.0, "maintenance")
    data = dump(ctl, 60.0, lambda t: t + 1000.0, "auto")
    again = make(World(share_world(best=0.8)), arms_for(CHAT_FEATURES, hopeless_last=0))
    restore(again, data, 5.0, lambda t: t - 995.0, "auto")
    assert again.mode == "advise" and again.freeze.reason(5.0) == "operator"
    assert again.freeze.rollbacks_last_hour(5.0) == 1 and again.bandit.to_dict() == ctl.bandit.to_dict()
    other = make(World(share_world(best=0.8)))
    restore(other, data, 5.0, lambda t: t - 995.0, "shadow")  # the profile's mode changed: it wins
    assert other.mode == "auto"


EVENTS = st.lists(st.tuples(st.sampled_from(["run", "write", "freeze", "unfreeze", "mode"]),
                            st.floats(0.0, 3.0), st.floats(0.0, 1.0)), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, best=st.floats(0.0, 4.0), seed=st.integers(0, 1000))
def test_whatever_happens_writes_stay_in_bounds_and_caps(events, best: float, seed: int) -> None:
    """Random operator actions, rates and worlds: every write is within PARAM_BOUNDS, integral where the
    core says so, and either the incumbent at that moment or a candidate within the step caps of it (a
    local step: one cap; an offline arm: ``arm_step_factor`` caps), and none happens while frozen or
    outside auto."""
    world = World(share_world(best), seed=seed)
    ctl = make(world, arms_for(CHAT_FEATURES, robust={"step_slo_share": 9.0, "delta_f": -40.0},
                               step_slo_share=best), explore_threshold=0.1)
    t = 0.0
    for kind, a, b in events:
        if kind == "run":
            world.rate = 1.0 + 40.0 * b
            world.run(ctl, t, t + 20.0 + 40.0 * a)
            t += 20.0 + 40.0 * a
        elif kind == "write":
            ctl.external_write({**world.params, "delta_f": -1.0 + 2 * b}, "api:test", t)
            world.params["delta_f"] = -1.0 + 2 * b
        elif kind == "freeze":
            ctl.set_freeze(True, t)
        elif kind == "unfreeze":
            ctl.set_freeze(False, t)
        else:
            ctl.set_mode(["off", "shadow", "advise", "auto"][int(b * 3.999)], t)
    for at, values, incumbent, arm in world.writes:
        factor = ctl.cfg.arm_step_factor if arm is not None and arm.startswith("arm:") else 1.0
        for k, v in values.items():
            lo, hi = PARAM_BOUNDS[k]
            assert lo <= v <= hi and (k not in INTEGER_PARAMS or v == int(v))
            assert abs(v - incumbent[k]) <= factor * ctl.space.caps[k] + 1e-9, (k, v, incumbent[k], arm)


def test_invalid_settings_are_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="mode"):
        TunerConfig(mode="on")
    with pytest.raises(ValueError, match="alpha"):
        TunerConfig(alpha=0.7)
    with pytest.raises(ValueError, match="min_requests"):
        TunerConfig(min_requests=0)
    with pytest.raises(ValueError, match="outside"):
        Controller(TunerConfig(), TENANTS, {**START, "alpha": 1e6})
