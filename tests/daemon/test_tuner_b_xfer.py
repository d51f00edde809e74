"""Which transfer budget the daemon's tuner may move: the one measured at startup is its ceiling, and a
policy with no host tier (or a budget of 0) leaves ``b_xfer`` out of the tuned knobs. A profile may list
``b_xfer`` in ``[tuner] knobs`` and give it a step cap; an unknown knob is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from superinfer.daemon.config import ProfileError, resolve
from superinfer.daemon.params import ParamStore
from superinfer.daemon.tuning import TunerService
from tests.daemon.conftest import TEST_PROFILE


def tuned(tmp_path: Path, budget: int, *sets: str):
    """The tuner's knob space in a daemon whose startup budget is ``budget`` blocks per iteration."""
    (tmp_path / "test.toml").write_text(TEST_PROFILE)
    cfg = resolve(None, profile_file=str(tmp_path / "test.toml"), sets=("tuner.mode=shadow", "tuner.storage=memory", *sets),
                  env={"XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_STATE_HOME": str(tmp_path / "s")})
    store = ParamStore(cfg.params(), budget, cfg.tenants, tmp_path / "params.json", "test")
    return TunerService(cfg, store).ctl


def test_the_startup_budget_bounds_the_tuned_b_xfer(tmp_path: Path) -> None:
    ctl = tuned(tmp_path, 800, "scheduler.policy=lvf")
    assert "b_xfer" in ctl.space.knobs and ctl.space.bounds["b_xfer"] == (0.0, 800.0)
    assert ctl.space.caps["b_xfer"] == 200 and ctl.incumbent["b_xfer"] == 800


@pytest.mark.parametrize("policy,budget", [("lvf-hbm", 800), ("vllm", 800), ("lvf", 0)])
def test_no_host_tier_no_tuned_budget(tmp_path: Path, policy: str, budget: int) -> None:
    ctl = tuned(tmp_path, budget, f"scheduler.policy={policy}")
    assert "b_xfer" not in ctl.space.knobs and "b_xfer" not in ctl.incumbent
    assert {"backfill", "tbt_credit", "step_slo_share"} <= set(ctl.space.knobs)


def test_a_profile_lists_b_xfer_with_its_own_cap(tmp_path: Path) -> None:
    ctl = tuned(tmp_path, 800, "tuner.knobs=b_xfer,alpha", "tuner.step_caps=b_xfer=50")
    assert ctl.space.knobs == ("b_xfer", "alpha") and ctl.space.caps["b_xfer"] == 50
    with pytest.raises(ProfileError, match="tuner.knobs"):
        tuned(tmp_path, 800, "tuner.knobs=b_xfer,speed")
